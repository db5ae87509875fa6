"""Faults and hostile values against a real systemd container (reached through `docker exec`):
values that try to run code through the env file, a damaged revert record, SIGINT/SIGTERM in the middle
of an apply, multi-line failure reasons, secrets in the run artifacts and a host name with '/'."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import REPO, run_cli
from containers import docker, docker_ready, node_exec, prepare, remove_nodes, start_nodes, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ready(), reason="needs Docker and the base image (.ci/docker-setup.sh)")]

NODE = f"gpuprep-faults-{os.getpid()}"
HOSTILE = {
    "GPUPREP_T_SUBST": "$(touch /tmp/pwned-subst)",
    "GPUPREP_T_BACKTICK": "`touch /tmp/pwned-backtick`",
    "GPUPREP_T_QUOTES": "say \"hi\" and it's \\ fine; $HOME ${PATH} a;b|c&d",
    "NCCL_DEBUG_FILE": "/var/log/nccl %h.log",
}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    start_nodes([NODE])
    inventory = write_inventory(tmp_path_factory.mktemp("faults") / "inventory.yml", [NODE])
    try:
        prepare(inventory)
        yield inventory
    finally:
        remove_nodes([NODE])


def apply(*args, env=None, playbook="apply"):
    done = run_cli(playbook, *args, "--json", env=env, timeout=900)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    return done, (json.loads(done.stdout) if done.stdout.strip().startswith("{") else None)


def python_env(argv_prefix):
    """The environment a command sees, as JSON, printed by python3 on the node."""
    code = "import json,os; print(json.dumps(dict(os.environ)))"
    return json.loads(node_exec(NODE, *argv_prefix, f"python3 -c '{code}'", check=True).stdout)


def test_hostile_values_neither_run_nor_break_a_login_and_reach_a_unit_unchanged(node):
    done, doc = apply("-i", str(node), "--tags", "nccl_env", "-e", "nccl_env_overrides=" + json.dumps(HOSTILE))
    assert done.returncode == 0, done.stdout + done.stderr
    login = python_env(["bash", "-lc"])
    for key, value in HOSTILE.items():
        assert login.get(key) == value, (key, login.get(key))
    assert node_exec(NODE, "sh", "-lc", "true").returncode == 0        # dash reads the same file
    unit = ("[Service]\nType=oneshot\nEnvironmentFile=/etc/gpuprep/env\n"
            "ExecStart=/usr/bin/python3 -c 'import json,os; json.dump(dict(os.environ), open(\"/root/unit-env.json\", \"w\"))'\n")
    node_exec(NODE, "sh", "-c", f"cat > /etc/systemd/system/gpuprep-envtest.service <<'EOF'\n{unit}EOF", check=True)
    node_exec(NODE, "systemctl", "daemon-reload", check=True)
    started = node_exec(NODE, "systemctl", "start", "gpuprep-envtest.service")
    assert started.returncode == 0, started.stderr
    seen = json.loads(node_exec(NODE, "cat", "/root/unit-env.json", check=True).stdout)
    for key, value in HOSTILE.items():
        assert seen.get(key) == value, (key, seen.get(key))
    for marker in ("/tmp/pwned-subst", "/tmp/pwned-backtick"):
        assert node_exec(NODE, "test", "-e", marker).returncode != 0, marker


@pytest.mark.parametrize("extra, named", [
    ({"nccl_env_overrides": {"GPUPREP_T_NL": "a\nb"}}, "control character"),
    ({"nccl_env_socket_ifname": "$(touch /tmp/pwned-ifname)"}, "NCCL_SOCKET_IFNAME"),
    ({"nccl_env_overrides": {"OMP_NUM_THREADS": "4; reboot"}}, "OMP_NUM_THREADS"),
])
def test_values_nccl_cannot_take_are_refused_before_anything_changes(node, extra, named):
    before = node_exec(NODE, "cat", "/etc/gpuprep/env").stdout
    args = [item for key, value in extra.items() for item in ("-e", f"{key}={json.dumps(value)}")]
    done, doc = apply("-i", str(node), "--tags", "nccl_env", *args)
    assert done.returncode == 1
    (failure,) = doc["hosts"][NODE]["failed_tasks"]
    assert named in failure["message"] and doc["hosts"][NODE]["changed"] == 0
    assert node_exec(NODE, "cat", "/etc/gpuprep/env").stdout == before
    assert node_exec(NODE, "test", "-e", "/tmp/pwned-ifname").returncode != 0


def _load_records(tmp_path):
    """Every role's revert record on the node, loaded (and so checksum-verified) by gpuprep's own reader."""
    from gpuprep.common.revert_record import load
    copy = tmp_path / "records"
    docker("cp", f"{NODE}:/var/lib/gpuprep", str(copy))
    return {role.name: load(str(role)) for role in copy.iterdir() if role.is_dir()}


def test_a_damaged_record_stops_apply_and_revert_and_keeps_the_originals(node, tmp_path):
    node_exec(NODE, "rm", "-rf", "/var/lib/gpuprep/system_tuning", "/etc/sysctl.d/90-gpuprep.conf")
    node_exec(NODE, "sh", "-c", "echo '# the operator original' > /etc/sysctl.d/90-gpuprep.conf", check=True)
    done, _ = apply("-i", str(node), "--tags", "system_tuning")
    assert done.returncode == 0, done.stdout
    records = _load_records(tmp_path)
    saved = records["system_tuning"]["files"]["/etc/sysctl.d/90-gpuprep.conf"]
    assert len(saved["sha256"]) == 64
    manifest = "/var/lib/gpuprep/system_tuning/manifest.json"
    intact = node_exec(NODE, "cat", manifest, check=True).stdout
    node_exec(NODE, "truncate", "-s", "40", manifest, check=True)
    applied = node_exec(NODE, "cat", "/etc/sysctl.d/90-gpuprep.conf").stdout

    done, doc = apply("-i", str(node), "--tags", "system_tuning", "-e", "system_tuning_sysctls={\"vm.swappiness\": 7}")
    assert done.returncode == 1
    (failure,) = doc["hosts"][NODE]["failed_tasks"]
    assert "system_tuning is damaged" in failure["message"] and "not valid JSON" in failure["message"]
    assert "mv /var/lib/gpuprep/system_tuning" in failure["message"]
    assert node_exec(NODE, "cat", "/etc/sysctl.d/90-gpuprep.conf").stdout == applied     # nothing changed
    copy = f"/var/lib/gpuprep/system_tuning/{saved['copy']}"
    assert node_exec(NODE, "cat", copy).stdout == "# the operator original\n"

    done, doc = apply("-i", str(node), "--tags", "system_tuning", playbook="revert")
    assert done.returncode == 1
    assert any("nothing of this role was reverted" in f["message"] for f in doc["hosts"][NODE]["failed_tasks"])
    assert node_exec(NODE, "cat", copy).stdout == "# the operator original\n"              # still kept

    node_exec(NODE, "sh", "-c", f"echo 'tampered' >> {copy}", check=True)
    node_exec(NODE, "sh", "-c", f"cat > {manifest} <<'EOF'\n{intact}\nEOF", check=True)
    done, doc = apply("-i", str(node), "--tags", "system_tuning", playbook="revert")
    assert done.returncode == 1
    assert any("does not match its checksum" in f["message"] for f in doc["hosts"][NODE]["failed_tasks"]), json.dumps(doc["hosts"][NODE]["failed_tasks"])

    node_exec(NODE, "sh", "-c", f"echo '# the operator original' > {copy}", check=True)
    done, doc = apply("-i", str(node), "--tags", "system_tuning", playbook="revert")
    assert done.returncode == 0, doc
    assert node_exec(NODE, "cat", "/etc/sysctl.d/90-gpuprep.conf").stdout == "# the operator original\n"


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_apply_reports_each_host_and_leaves_no_half_written_file(node, tmp_path, sig, code):
    state, scratch = tmp_path / "state", pathlib.Path(tempfile.mkdtemp(prefix="gp-", dir="/tmp"))   # a short TMPDIR
    env = dict(os.environ, XDG_STATE_HOME=str(state), TMPDIR=str(scratch))
    proc = subprocess.Popen([sys.executable, "-m", "gpuprep", "apply", "-i", str(node), "--full", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 600          # a bound on a hang, not a speed limit
    events = []
    while time.monotonic() < deadline and proc.poll() is None and len(events) < 12:
        runs = list((state / "gpuprep" / "runs").glob("*/job_events")) if state.exists() else []
        events = list(runs[0].iterdir()) if runs else []
        time.sleep(0.2)
    assert proc.poll() is None, "apply ended before it could be interrupted"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err
    assert "Traceback" not in err and "internal error" not in err
    doc = json.loads(out)
    assert doc["interrupted"] == sig.name and not doc["ok"]
    host = doc["hosts"][NODE]
    assert host["interrupted"] and host["interrupted_at"]
    _load_records(tmp_path)                    # every revert record on the node still loads and verifies
    import psutil
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if str(node) in " ".join(p.info["cmdline"] or []) and "ansible-playbook" in " ".join(p.info["cmdline"] or [])]
    assert left == [], left                    # nothing of the cancelled run lives on (Mitogen's mux included)
    assert list(scratch.iterdir()) == []       # nor is left in TMPDIR (Mitogen's socket included)
    scratch.rmdir()
    leftovers = node_exec(NODE, "sh", "-c", "find /etc /var/lib/gpuprep -name '.ansible_tmp*' "
                                            "-o -name '.manifest.json.*' -o -name '*.tmp'").stdout
    assert leftovers.strip() == ""
    if sig == signal.SIGINT:        # what either signal leaves is alike (the checks above): one re-run shows it ends
        again, doc = apply("-i", str(node))
        assert again.returncode == 0, doc                     # a re-run finishes the job


def test_multi_line_reasons_are_kept_whole(node):
    done, doc = apply("-i", str(node), "--tags", "gpu_clocks", "-e", "gpu_clocks_by_model=not-a-dict")
    assert done.returncode == 1
    (failure,) = doc["hosts"][NODE]["failed_tasks"]
    assert "Validation of arguments failed" in failure["message"]
    assert "gpu_clocks_by_model" in failure["message"]             # the line after the first one
    text = run_cli("apply", "-i", str(node), "--tags", "gpu_clocks", "-e", "gpu_clocks_by_model=not-a-dict",
                   timeout=900)
    assert "gpu_clocks_by_model" in text.stdout


def test_artifacts_hold_no_extra_vars_and_no_controller_environment(node, tmp_path):
    state = tmp_path / "state"
    secret = "s3cr3t-" + os.urandom(6).hex()
    env = {"XDG_STATE_HOME": str(state), "GPUPREP_TEST_CONTROLLER_SECRET": "ctl-" + secret}
    done, doc = apply("-i", str(node), "--tags", "nccl_env",
                      "-e", "nccl_env_overrides=" + json.dumps({"GPUPREP_TOKEN": secret}), env=env)
    assert done.returncode == 0, done.stdout
    run_dir = doc["artifacts"]
    assert run_dir.startswith(str(state)) and os.listdir(run_dir)
    for folder, _dirs, files in os.walk(run_dir):
        for name in files:
            text = open(os.path.join(folder, name), "rb").read().decode("utf-8", "replace")
            assert secret not in text, os.path.join(folder, name)
            assert "GPUPREP_TEST_CONTROLLER_SECRET" not in text, os.path.join(folder, name)
    assert not os.path.exists(os.path.join(run_dir, "fact_cache"))
    assert f'GPUPREP_TOKEN="{secret}"' in node_exec(NODE, "cat", "/etc/gpuprep/env").stdout   # yet it was applied


def test_a_host_name_with_a_slash_is_just_a_name(node, tmp_path):
    inventory = tmp_path / "slash.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"rack1/" + NODE: {
        "ansible_host": NODE, "ansible_connection": "docker", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    done, doc = apply("-i", str(inventory), "--tags", "nccl_env", "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(doc["hosts"]) == ["rack1/" + NODE]


def _gpus_on_node():
    from gpuprep.parsers.nvsmi import parse_xml
    _header, gpus = parse_xml(node_exec(NODE, "nvidia-smi", "-q", "-x", check=True).stdout)
    return [fields for _bus, fields, _element in gpus]


def _fake_state(change):
    """Set what the fake driver reports for a GPU (a load held below its lock, an admin's earlier setting)."""
    state = json.loads(node_exec(NODE, "cat", "/var/lib/fake-nvidia/state.json").stdout or "{}")
    change(state)
    node_exec(NODE, "sh", "-c", f"cat > /var/lib/fake-nvidia/state.json <<'EOF'\n{json.dumps(state)}\nEOF", check=True)


def test_revert_restores_each_gpus_power_limit_and_releases_the_locks(node):
    apply("-i", str(node), playbook="revert")
    node_exec(NODE, "rm", "-rf", "/var/lib/gpuprep/gpu_clocks")
    original = _gpus_on_node()
    node_exec(NODE, "nvidia-smi", "-i", "1", "-pl", "180", check=True)       # an admin's limit before gpuprep
    done, doc = apply("-i", str(node), "--tags", "gpu_persistence,gpu_clocks", "-e", "gpu_clocks_power_limit_w=200")
    assert done.returncode == 0, doc
    applied = _gpus_on_node()
    assert [g["power_limit_w"] for g in applied] == [200.0, 200.0]
    assert [g["clock_graphics_mhz"] for g in applied] == [2100, 2100]          # locked at the maximum
    # the GPUs stay initialised throughout (the fake driver never tears them down): only revert can undo it
    done, doc = apply("-i", str(node), "--tags", "gpu_clocks", playbook="revert")
    assert done.returncode == 0, doc
    reverted = _gpus_on_node()
    assert [g["power_limit_w"] for g in reverted] == [original[0]["power_limit_w"], 180.0]
    assert [g["clock_graphics_mhz"] for g in reverted] == [g["clock_graphics_mhz"] for g in original]


def test_a_gpu_held_below_its_lock_by_the_power_cap_is_neither_drifted_nor_failed(node):
    done, _ = apply("-i", str(node), "--tags", "gpu_persistence,gpu_clocks")
    assert done.returncode == 0
    _fake_state(lambda s: s["0"].update(held_at=1740, held_by=["sw_power_cap"]))   # a job at the power cap
    done, doc = apply("-i", str(node), "--tags", "gpu_clocks", "--full")
    assert done.returncode == 0, doc
    assert doc["hosts"][NODE]["changed"] == 0, doc["hosts"][NODE]["changed_tasks"]
    _fake_state(lambda s: s["0"].update(held_at=1740, held_by=[]))       # below the lock for no reason: lost
    done, doc = apply("-i", str(node), "--tags", "gpu_clocks")
    assert done.returncode == 0, doc
    assert any("Re-apply the plan" in t for t in doc["hosts"][NODE]["changed_tasks"]), doc["hosts"][NODE]
    assert _gpus_on_node()[0]["clock_graphics_mhz"] == 2100                  # re-locked


def test_gpu_clocks_without_persistence_stops_before_changing_anything(node):
    node_exec(NODE, "nvidia-smi", "-i", "0", "-pm", "0", check=True)
    try:
        done, doc = apply("-i", str(node), "--tags", "gpu_clocks", "--full", "-e", "gpu_clocks_graphics_mhz=1800")
        assert done.returncode == 1
        (failure,) = doc["hosts"][NODE]["failed_tasks"]
        assert "without persistence mode" in failure["message"] and "Nothing was changed" in failure["message"]
        assert doc["hosts"][NODE]["changed"] == 0
        assert _gpus_on_node()[1]["clock_graphics_mhz"] == 2100                  # still the earlier lock
    finally:
        node_exec(NODE, "nvidia-smi", "-i", "0", "-pm", "1", check=True)


def test_the_boot_script_applies_every_gpu_past_one_that_refuses(node):
    done, _ = apply("-i", str(node), "--tags", "gpu_persistence,gpu_clocks")
    assert done.returncode == 0
    conf = node_exec(NODE, "cat", "/etc/gpuprep/clocks.conf", check=True).stdout
    node_exec(NODE, "nvidia-smi", "-rgc", check=True)                        # a driver reload lost the locks
    first = next(line.split()[0] for line in conf.splitlines() if line.startswith("GPU-"))
    assert [g["uuid"] for g in _gpus_on_node()][0] == first           # by UUID: indexes shift when a GPU is lost
    gone = "GPU-00000000-0000-0000-0000-000000000007"
    stale = conf.replace(first, gone, 1)                             # GPU 0's line now names a GPU that is gone
    node_exec(NODE, "sh", "-c", f"cat > /etc/gpuprep/clocks.conf <<'EOF'\n{stale}EOF", check=True)
    try:
        done = node_exec(NODE, "/usr/local/sbin/gpuprep-apply-clocks")
        assert done.returncode == 1
        assert f"GPU {gone} refused -lgc" in done.stderr and "No devices were found" in done.stderr
        assert _gpus_on_node()[1]["clock_graphics_mhz"] == 2100             # the GPU after the refusal: applied
    finally:
        node_exec(NODE, "sh", "-c", f"cat > /etc/gpuprep/clocks.conf <<'EOF'\n{conf}EOF", check=True)


UNITS = REPO / "tests" / "data" / "units"       # real packaged units, provenance in PROVENANCE.tsv
LAYOUTS = {
    # name: (unit file text or None for a .run install without a unit, the daemon's path, its --user)
    "ubuntu-560": ((UNITS / "ubuntu.pop-os.nvidia-compute-utils-560.nvidia-persistenced.service").read_text(),
                   "/usr/bin/nvidia-persistenced", "nvidia-persistenced"),
    "ubuntu-580": ((UNITS / "ubuntu.canonical.nvidia-compute-utils-580.nvidia-persistenced.service").read_text(),
                   "/usr/bin/nvidia-persistenced", "nvidia-persistenced"),
    "nvidia-rhel": ((UNITS / "nvidia-yum.rhel.nvidia-persistenced.service").read_text(),
                    "/usr/sbin/nvidia-persistenced", "nvidia-persistenced"),
    # Debian builds its unit from NVIDIA's template with `sed s/__USER__/nvpd/` (debian/rules)
    "debian": ((UNITS / "nvidia-upstream.nvidia-persistenced.service.template").read_text().replace("__USER__", "nvpd"),
               "/usr/bin/nvidia-persistenced", "nvpd"),
    "no-unit": (None, "/usr/bin/nvidia-persistenced", None),
}


def _persistence(name):
    from gpuprep.parsers.nvsmi import parse_xml
    _header, gpus = parse_xml(node_exec(name, "nvidia-smi", "-q", "-x", check=True).stdout)
    return [fields["persistence_mode"] for _bus, fields, _element in gpus]


VENDOR_UNIT = "/lib/systemd/system/nvidia-persistenced.service"


def _lay_out(name, layout):
    """The node as a packaged driver leaves it: the vendor's unit (or none), the daemon where it installs it,
    persistence off; returns what `systemctl cat` says before gpuprep."""
    unit, daemon, _user = LAYOUTS[layout]
    node_exec(name, "systemctl", "stop", "nvidia-persistenced")
    node_exec(name, "rm", "-rf", "/etc/systemd/system/nvidia-persistenced.service", VENDOR_UNIT)
    if daemon != "/usr/bin/nvidia-persistenced":
        node_exec(name, "mv", "/usr/bin/nvidia-persistenced", daemon, check=True)
    if unit:
        node_exec(name, "sh", "-c", f"cat > {VENDOR_UNIT} <<'EOF'\n{unit}EOF", check=True)
    node_exec(name, "systemctl", "daemon-reload", check=True)
    node_exec(name, "nvidia-smi", "-pm", "0", check=True)
    return node_exec(name, "systemctl", "cat", "nvidia-persistenced").stdout


def _reboot(name):
    """A reboot: the daemon is gone and the GPUs de-initialised; booting starts multi-user.target. What it leaves."""
    node_exec(name, "systemctl", "stop", "nvidia-persistenced", check=True)
    node_exec(name, "nvidia-smi", "-pm", "0", check=True)
    wanted = node_exec(name, "systemctl", "list-dependencies", "--plain", "multi-user.target").stdout
    node_exec(name, "systemctl", "start", "multi-user.target", check=True)
    return {"wanted": "nvidia-persistenced.service" in wanted, "persistence": _persistence(name),
            "active": node_exec(name, "systemctl", "is-active", "nvidia-persistenced").stdout.strip()}


def _observe(name):
    argv = node_exec(name, "cat", "/run/nvidia-persistenced/argv").stdout.split()
    return {"persistence": _persistence(name), "argv": argv,
            "active": node_exec(name, "systemctl", "is-active", "nvidia-persistenced").stdout.strip()}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """One node per packaged layout, each run through apply, a fast re-run, a reboot and revert together: one
    Ansible run per stage for all layouts (a run's cost is mostly its own, not its hosts'). What each stage left on
    each node, by layout, for the tests below to hold."""
    names = {layout: f"gpuprep-layout-{i}-{os.getpid()}" for i, layout in enumerate(sorted(LAYOUTS))}
    start_nodes(list(names.values()))
    inventory = write_inventory(tmp_path_factory.mktemp("layouts") / "inventory.yml", list(names.values()))
    try:
        prepare(inventory)
        seen = {layout: {"before": _lay_out(name, layout)} for layout, name in names.items()}
        done, doc = apply("-i", str(inventory), "--tags", "gpu_persistence")
        for layout, name in names.items():
            seen[layout].update(applied=(done.returncode, doc["hosts"][name]["failed_tasks"]), **_observe(name))
        again, doc = apply("-i", str(inventory), "--tags", "gpu_persistence", "--full")
        for layout, name in names.items():
            seen[layout]["rerun"] = (again.returncode, doc["hosts"][name]["changed_tasks"])
            seen[layout]["boot"] = _reboot(name)
        done, doc = apply("-i", str(inventory), "--tags", "gpu_persistence", playbook="revert")
        for layout, name in names.items():
            seen[layout]["reverted"] = (done.returncode, doc["hosts"][name]["failed_tasks"])
            seen[layout]["after"] = node_exec(name, "systemctl", "cat", "nvidia-persistenced").stdout
        yield seen
    finally:
        remove_nodes(list(names.values()))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_persistence_on_each_packaged_layout_survives_a_reboot_and_reverts(layouts, layout):
    seen, user = layouts[layout], LAYOUTS[layout][2]
    assert seen["applied"] == (0, []), seen["applied"]
    assert seen["persistence"] == [True, True] and seen["active"] == "active", seen
    argv = seen["argv"]
    assert "--persistence-mode" in argv and "--no-persistence-mode" not in argv, argv
    assert (argv[argv.index("--user") + 1] if "--user" in argv else None) == user     # privilege drop kept
    assert seen["rerun"] == (0, []), seen["rerun"]                                   # idempotent
    assert seen["boot"] == {"wanted": True, "persistence": [True, True], "active": "active"}, seen["boot"]
    assert seen["reverted"] == (0, []), seen["reverted"]
    assert seen["after"] == seen["before"]
