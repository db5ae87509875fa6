"""The Kubernetes manifests (deploy/kubernetes) against the Kubernetes API schema (kubernetes-validate, from PyPI;
no API server runs here), and the node-problem-detector configuration against gpuprep itself: one condition per
area gpuprep judges, and each rule a command the node probe answers in NPD's contract."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, corpus

K8S = REPO / "deploy" / "kubernetes"
MANIFESTS = sorted(K8S.glob("*.yaml"))


def documents():
    return [(path.name, doc) for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.mark.parametrize("name, doc", documents(), ids=lambda v: v if isinstance(v, str) else v.get("kind"))
def test_every_manifest_is_valid_for_the_current_kubernetes_api(name, doc):
    import kubernetes_validate
    version = kubernetes_validate.utils.latest_version()
    kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_rejects_a_broken_manifest():
    import kubernetes_validate
    (_, daemonset), = [d for d in documents() if d[1]["kind"] == "DaemonSet"]
    broken = json.loads(json.dumps(daemonset))
    broken["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []       # a typo of volumeMounts
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.utils.latest_version(), strict=True)


def monitor():
    (config,) = [doc for _, doc in documents() if doc["kind"] == "ConfigMap"]
    return json.loads(config["data"]["gpuprep-monitor.json"])


def test_one_permanent_condition_per_area_gpuprep_judges():
    from gpuprep.rules.ids import areas
    config = monitor()
    assert config["plugin"] == "custom" and config["pluginConfig"]["max_output_length"] == 80
    covered = {a for rule in config["rules"] for o, a in zip(rule["args"], rule["args"][1:]) if o == "--only"}
    assert all("--require-gpu" in rule["args"] for rule in config["rules"])     # GPU nodes: not judged is a problem
    assert covered == areas() - {"drift"}           # drift compares hosts: no single node's condition
    assert {r["condition"] for r in config["rules"]} == {c["type"] for c in config["conditions"]}
    assert all(r["type"] == "permanent" for r in config["rules"])


def test_each_rule_is_a_command_the_probe_answers_in_npds_contract(tmp_path):
    from gpuprep.zipapp import build
    pyz = build(str(tmp_path / "gpuprep-probe.pyz"))
    failing = corpus("a100-sxm4-x4.nvidia-smi-q.txt")          # gpu.row-remap fails
    codes = {}
    for rule in monitor()["rules"]:
        argv = [sys.executable, pyz] + rule["args"][1:] + ["--from", failing]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        (line,) = done.stdout.splitlines()
        assert done.returncode in (0, 1) and len(line) <= 80, (rule["condition"], done.stdout, done.stderr)
        codes[rule["condition"]] = done.returncode
    assert codes["GpuprepGpuUnhealthy"] == 1 and codes["GpuprepContainerUnhealthy"] == 0
