"""IMEX (GB200/GB300 multi-node NVLink) from real captures (tests/corpus/imex, provenance in its PROVENANCE.tsv): each
with the exact fabric.imex* findings it must give; edited copies of a real 18-node `nvidia-imex-ctl -N` for what no
public capture shows (a DEGRADED domain, a lost connection, a version mismatch); the live probe through stand-ins of
`nvidia-imex-ctl` (a true boundary: NVIDIA's CLI) printing real output, and a host without IMEX knowing nothing."""
import stat

import pytest

from conftest import CORPUS
from gpuprep import api
from gpuprep.parsers import import_files
from gpuprep.snapshot import Snapshot

IMEX = CORPUS / "imex"
AWS = IMEX / "aws-parallelcluster-ug-p6e-gb200-18node-domain-up.imex-ctl-N.txt"

EXPECTED = {   # capture -> its fabric findings, as (id, severity)
    AWS.name: [("fabric.imex-domain", "pass")],
    "jpsnips-nv-imex-repro-2node-domain-up.imex-ctl-N.txt": [("fabric.imex-domain", "pass")],
    "jpsnips-nv-imex-repro-1node-domain-up.imex-ctl-N.txt": [("fabric.imex-domain", "pass")],
    "nvidia-srt-slurm-test-preflight-ready-domain.imex-ctl-N-H.txt": [("fabric.imex-domain", "pass")],
    "nvidia-srt-slurm-test-preflight-unavailable-node.imex-ctl-N-H.txt": [("fabric.imex-domain", "fail")],
    "jpsnips-nv-imex-repro-1node.imex-ctl-q.txt": [("fabric.imex", "pass")],
    "k8s-dra-driver-gpu-pr-333-startup-probe-ipv6-connect-failure.imex-ctl-q.txt": [("fabric.imex", "fail")],
    "linux-system-roles-hpc-pr-85-active-running-truncated.systemctl-status.txt": [("fabric.imex", "pass")],
    "k8s-dra-driver-gpu-issue-289-no-matching-interface-partial.nvidia-imex-log.txt": [("fabric.imex", "fail")],
    # healthy start-up logs say nothing either way: no finding (a log is not the daemon's state)
    "jpsnips-nv-imex-repro-2node-node0-startup.nvidia-imex-log.txt": [],
    "nvidia-cloud-native-docs-dra-imex-channel-injection-570.124.06.nvidia-imex-log.txt": [],
    "k8s-dra-driver-gpu-pr-1465-580.159.04-stderr-hostnames-partial.nvidia-imex-log.txt": [],
}


def judged(snap):
    return sorted((f.id, f.severity) for f in api.check(facts=snap).findings if f.id.startswith("fabric.imex"))


def test_every_capture_in_the_corpus_is_expected():
    assert sorted(p.name for p in IMEX.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_capture_gives_exactly_its_findings(name):
    assert judged(import_files([str(IMEX / name)])) == sorted(EXPECTED[name])


def test_nodes_versions_and_the_local_node_are_read():
    imex = import_files([str(AWS)]).imex
    assert (imex.domain, len(imex.nodes), imex.links) == ("UP", 18, [])
    assert {n.version for n in imex.nodes} == {"570.172"} and imex.nodes[17].address == "172.31.56.47"
    local = import_files([str(IMEX / "nvidia-srt-slurm-test-preflight-ready-domain.imex-ctl-N-H.txt")]).imex.nodes
    assert [(n.index, n.local) for n in local] == [(0, None), (1, True)]
    gone = import_files([str(IMEX / "nvidia-srt-slurm-test-preflight-unavailable-node.imex-ctl-N-H.txt")]).imex.nodes
    assert [(n.status, n.version) for n in gone] == [("READY", "580.173.02"), ("UNAVAILABLE", None)]


def _edited(tmp_path, old, new, count=1):
    text = AWS.read_text()
    assert text.count(old) >= count
    path = tmp_path / "edited.txt"
    path.write_text(text.replace(old, new, count))
    return import_files([str(path)])


def _domain_finding(snap):
    (finding,) = [f for f in api.check(facts=snap).findings if f.id == "fabric.imex-domain"]
    return finding


def test_a_degraded_domain_fails(tmp_path):
    finding = _domain_finding(_edited(tmp_path, "Domain State: UP", "Domain State: DEGRADED"))
    assert finding.severity == "fail" and "domain DEGRADED" in finding.title


def test_a_connection_not_connected_fails_and_is_named(tmp_path):
    row = "       3        C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C   C"
    finding = _domain_finding(_edited(tmp_path, row, row[:-1] + "N"))
    assert finding.severity == "fail" and finding.evidence["connections"] == ["3->17 N"]


def test_nodes_of_two_imex_versions_fail(tmp_path):
    line = "Node #5   - 172.31.50.44    - READY                - Version: 570.172"
    finding = _domain_finding(_edited(tmp_path, line, line.replace("570.172", "570.148")))
    assert finding.severity == "fail" and finding.evidence["versions"] == ["570.148", "570.172"]


def test_a_version_mismatch_cell_fails(tmp_path):
    row = "       0        C   C   C"
    finding = _domain_finding(_edited(tmp_path, row, "       0        C   !V! C"))
    assert finding.severity == "fail" and finding.evidence["connections"] == ["0->1 !V!"]


def test_the_domain_and_the_unit_from_two_captures_are_judged_together():
    snap = import_files([str(AWS), str(IMEX / "linux-system-roles-hpc-pr-85-active-running-truncated.systemctl-status.txt")])
    assert judged(snap) == [("fabric.imex", "pass"), ("fabric.imex-domain", "pass")]


def test_the_snapshot_keeps_imex_and_refuses_a_bad_field():
    from gpuprep.errors import BadInput
    snap = import_files([str(AWS)])
    again = Snapshot.from_json(snap.to_json())
    assert again.imex == snap.imex
    data = snap.to_dict()
    data["imex"]["nodes"][2]["index"] = "two"
    with pytest.raises(BadInput, match=r"imex\.nodes\[2\]\.index"):
        Snapshot.from_dict(data, "saved.json")


def _stand_in(directory, name, script):
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """A PATH with nothing but the stand-ins this test writes (no systemctl: systemd's view is unknown)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def test_the_live_probe_reads_the_domain_from_nvidia_imex_ctl(tmp_path, bare_path):
    from gpuprep.probe.fabric import probe_imex
    _stand_in(bare_path, "nvidia-imex-ctl", f'[ "$1" = -N ] && exec /bin/cat "{AWS}"\nexit 1\n')
    (tmp_path / "etc" / "nvidia-imex").mkdir(parents=True)
    (tmp_path / "etc" / "nvidia-imex" / "nodes_config.cfg").write_text("# the domain\n10.0.0.1\n10.0.0.2\n\n")
    imex = probe_imex(root=str(tmp_path))
    assert (imex.installed, imex.configured_nodes, imex.domain, len(imex.nodes)) == (True, 2, "UP", 18)


def test_the_live_probe_reports_a_daemon_it_cannot_reach(tmp_path, bare_path):
    """-N fails when the daemon is down; -q then says why, in the words of a real failure (tests/corpus/imex)."""
    from gpuprep.probe.fabric import probe_imex
    said = (IMEX / "k8s-dra-driver-gpu-pr-333-startup-probe-ipv6-connect-failure.imex-ctl-q.txt").read_text()
    said = said.split("Startup probe failed: ", 1)[1]         # the kubelet's prefix off: the command's own line
    _stand_in(bare_path, "nvidia-imex-ctl", f"echo '{said.strip()}'\nexit 1\n")
    snap = Snapshot(imex=probe_imex(root=str(tmp_path)))
    assert snap.imex.query.startswith("Query Status returned error code: 14")
    assert judged(snap) == [("fabric.imex", "fail")]


def test_a_host_without_imex_knows_nothing_and_is_not_judged(tmp_path, bare_path):
    from gpuprep.probe.fabric import probe_imex
    snap = Snapshot(imex=probe_imex(root=str(tmp_path)))
    assert snap.imex.installed is None and judged(snap) == []
