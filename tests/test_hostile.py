"""A compromised node, a hostile inventory, a careless operator (issue classes of the hardening round): each case
states the exit code, the one-line message, and what must not happen (nothing run, nothing written, nothing
leaked, nothing lost, no forged line)."""
import json
import os
import re
import stat

import pytest

from conftest import corpus, run_cli

H100 = "h100-sxm-x8.nvidia-smi-q.txt"
ASUS = ["asus-esc8000a-e12-4x-rtx6000ada.topo-m.txt", "asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt"]
# what a compromised node writes into its own facts: an OSC 52 clipboard write, a screen clear, a forged verdict
# line, a bidi override, a lone surrogate (valid as a JSON escape, invalid Unicode) and a C0 control
OSC52 = "\x1b]52;c;Y3VybCBldmlsLnNofHNo\x07"
FORGED = "\nOK: 0 of 4 host(s) failed\n"


def _one_error_line(done, code, pattern):
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code, done.stderr + done.stdout[-500:]
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert len(lines) == 1 and re.search(pattern, lines[0]), done.stderr


# ---------------------------------------------------------------------------- 1. code run from data
def test_an_environment_name_ending_in_a_newline_is_refused():
    done = run_cli("nccl-env", "--set", "X\n=1")
    _one_error_line(done, 2, r"not a valid environment variable name")
    assert done.stdout == ""


def _plan(tmp_path, change):
    path = tmp_path / "plan.json"
    assert run_cli("plan", *[a for n in ASUS for a in ("--from", corpus(n))], "--json", "-o", str(path)).returncode == 0
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("change, message", [
    (lambda d: d["ranks"][0]["env"].update(LD_PRELOAD="/tmp/evil.so"), r"ranks\[0\]\.env\.LD_PRELOAD: a plan sets only"),
    (lambda d: d["ranks"][1]["env"].update(PATH="/tmp/evil"), r"ranks\[1\]\.env\.PATH: a plan sets only"),
    (lambda d: d["ranks"][0]["env"].update(OMP_NUM_THREADS="4\n"), r"ranks\[0\]\.env: OMP_NUM_THREADS"),
    (lambda d: d["ranks"][0].update(cpus="hot"), r"ranks\[0\]\.cpus: expected a list, got str"),
    (lambda d: d["ranks"][0].update(cpus=[0, "1"]), r"ranks\[0\]\.cpus\[1\]: expected a CPU number"),
    (lambda d: d["ranks"][0].update(local_rank=None), r"ranks\[0\]\.local_rank: expected a whole number"),
    (lambda d: d.update(ranks={"0": {}}), r"ranks: expected a list, got dict"),
    (lambda d: d.update(schema="gpuprep.plan/2"), r"schema 'gpuprep.plan/2' is not 'gpuprep.plan/1'"),
])
def test_a_tampered_plan_runs_nothing(tmp_path, change, message):
    """A plan on a shared file system is data: `launch` refuses it, naming the file and the JSON path, and the
    command never starts."""
    witness = tmp_path / "ran"
    done = run_cli("launch", "--plan", str(_plan(tmp_path, change)), "--", "touch", str(witness),
                   env={"LOCAL_RANK": "0"})
    _one_error_line(done, 2, str(tmp_path / "plan.json").replace(".", r"\.") + ": " + message)
    assert not witness.exists()


def test_a_deeply_nested_plan_is_bad_input(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100000 + "]" * 100000)
    done = run_cli("launch", "--plan", str(path), "--", "true", env={"LOCAL_RANK": "0"})
    _one_error_line(done, 2, r"not JSON")


# ---------------------------------------------------------------------------- 3. reports forged or broken
def _hostile_snapshot(tmp_path):
    document = json.loads(run_cli("snapshot", "--from", corpus(H100)).stdout)
    document["system"]["hostname"] = "gpu-07" + OSC52 + "\x1b[2J" + FORGED
    document["system"]["kernel_cmdline"] = "quiet \x01\x02 iommu=pt \u202eevil"
    document["gpus"][0]["name"] = "NVIDIA H100 80GB HBM3 \ud800"
    document["gpus"][1]["vbios_version"] = "96.00.89.00.01\x1b[1A"     # free text (a version field is checked)
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(document))              # ensure_ascii: the surrogate travels as \ud800
    return path


def test_a_snapshot_whose_version_field_is_no_version_is_refused_naming_it(tmp_path):
    document = json.loads(_hostile_snapshot(tmp_path).read_text())
    document["software"]["driver_version"] = "565.57.01\x1b[1A"
    (tmp_path / "bad.json").write_text(json.dumps(document))
    _one_error_line(run_cli("check", "--from", str(tmp_path / "bad.json")), 2, r"software\.driver_version: .* is not a driver version")


def test_node_strings_cannot_write_the_terminal_or_forge_a_line(tmp_path):
    done = run_cli("check", "--from", str(_hostile_snapshot(tmp_path)), "-v")
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "\u202e" not in done.stdout
    assert not any(line.startswith("OK: 0 of 4") for line in done.stdout.splitlines())
    assert "\\x1b]52;c;" in done.stdout and "\\nOK: 0 of 4 host(s) failed\\n" in done.stdout     # shown, escaped
    facts = run_cli("check", "--from", str(_hostile_snapshot(tmp_path)), "--facts-only")
    assert facts.returncode == 0 and "\x1b" not in facts.stdout and "\\x1b[2J" in facts.stdout


@pytest.mark.parametrize("fmt", ["junit", "html", "prometheus", "json"])
def test_every_format_renders_a_hostile_snapshot(tmp_path, fmt):
    out = tmp_path / f"report.{fmt}"
    done = run_cli("check", "--from", str(_hostile_snapshot(tmp_path)), "--format", fmt, "-o", str(out))
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    text = out.read_text(encoding="utf-8")
    if fmt == "junit":
        import xml.etree.ElementTree as ET
        ET.fromstring(text.encode())                   # XML 1.0: no C0 control characters, no surrogates
        assert "\x1b" not in text and "\x07" not in text and "\\x1b]52;c;" in text
    if fmt == "prometheus":
        from prometheus_client.parser import text_string_to_metric_families
        assert list(text_string_to_metric_families(text))


# ---------------------------------------------------------------------------- 4. files lost or clobbered
def test_output_over_the_input_is_refused(tmp_path):
    source = tmp_path / "host.json"
    source.write_text(run_cli("snapshot", "--from", corpus(H100)).stdout)
    before = source.read_bytes()
    done = run_cli("check", "--from", str(source), "--format", "json", "-o", str(source))
    _one_error_line(done, 2, r"is also an input")
    assert source.read_bytes() == before


def test_reports_honour_the_umask(tmp_path):
    import subprocess
    import sys
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "gpuprep", "check", "--from", corpus(H100), "--format", "json",
                           "-o", str(out)], capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.umask(0o077))
    assert done.returncode in (0, 1), done.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600


def test_a_device_is_written_through_not_replaced(tmp_path):
    done = run_cli("check", "--from", corpus(H100), "--format", "json", "-o", "/dev/null")
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    import threading
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    done = run_cli("check", "--from", corpus(H100), "--format", "json", "-o", str(fifo))
    reader.join(timeout=60)
    assert done.returncode in (0, 1) and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert json.loads(got[0])["schema"].startswith("gpuprep.check/")


def test_a_full_disk_is_a_failure_not_exit_0():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    done = run_cli("check", "--from", corpus(H100), "--format", "json", "-o", "/dev/full")
    _one_error_line(done, 2, r"/dev/full: cannot write")


# ---------------------------------------------------------------------------- 5. wrong or silent results
def test_empty_tag_lists_are_refused_not_taken_as_every_role():
    for argv in (["apply", "--local", "--tags", " , "], ["revert", "--local", "--tags", ""],
                 ["apply", "--local", "--skip-tags", ","]):
        _one_error_line(run_cli(*argv), 2, r"names no role")


def test_master_with_one_node_and_facts_only_with_require_gpu_are_refused():
    _one_error_line(run_cli("burnin", "--master", "127.0.0.1:29500", "--duration", "10s"), 2, r"--master is for a multi-node")
    _one_error_line(run_cli("check", "--require-gpu", "--facts-only", "--from", corpus(H100)), 2, r"--facts-only judges nothing")


def test_an_nvidia_smi_table_cut_before_its_gpu_rows_is_not_healthy(tmp_path):
    cut = tmp_path / "cut.txt"
    cut.write_text("".join(open(corpus("h100-sxm-x8.nvidia-smi.txt")).readlines()[:7]))
    _one_error_line(run_cli("check", "--from", str(cut)), 2, r"cut\.txt: the nvidia-smi table ends before its GPU rows")


@pytest.mark.parametrize("torch, kind", [("2.5.1+cpu", "CPU-only"), ("2.5.1+rocm6.2", "ROCm")])
def test_compat_says_a_cpu_or_rocm_wheel_cannot_use_the_gpus(torch, kind):
    done = run_cli("compat", "--driver", "535.104.05", "--torch", torch, "--json")
    assert done.returncode == 1, done.stderr
    (finding,) = json.loads(done.stdout)["findings"]
    assert finding["id"] == "compat.torch-cpu-only" and finding["severity"] == "fail" and kind in finding["title"]


# ---------------------------------------------------------------------------- 6. malformed input named precisely
@pytest.mark.parametrize("change, message", [
    (lambda d: d["gpus"][2].update(temperature_c="hot"), r"gpus\[2\]\.temperature_c: expected int, got 'hot'"),
    (lambda d: d.update(gpus=[None]), r"gpus\[0\]: expected an object, got null"),
    (lambda d: d["gpus"][0].update(memory_total_mib=int("9" * 400)), r"gpus\[0\]\.memory_total_mib: a number of 400 digits"),
    (lambda d: d["gpus"][0].update(index=True), r"gpus\[0\]\.index: expected int, got True"),
    (lambda d: d.update(schema="gpuprep.snapshot/\u00b2"), r"unknown snapshot schema"),
    (lambda d: d.update(schema="gpuprep.snapshot/" + "9" * 5000), r"unknown snapshot schema"),
])
def test_a_malformed_snapshot_names_the_file_and_the_field(tmp_path, change, message):
    document = json.loads(run_cli("snapshot", "--from", corpus(H100)).stdout)
    change(document)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    _one_error_line(run_cli("check", "--from", str(path)), 2, r"bad\.json: .*" + message)


def test_deeply_nested_json_is_bad_input(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"schema": "gpuprep.snapshot/1", "gpus": ' + "[" * 50000 + "]" * 50000 + "}")
    _one_error_line(run_cli("check", "--from", str(path)), 2, r"deep\.json: JSON nested too deeply")


# ---------------------------------------------------------------------------- 7. resource exhaustion
def test_a_yaml_alias_bomb_in_e_file_is_refused_before_it_expands(tmp_path):
    bomb = tmp_path / "vars.yml"
    rows = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    rows += [f"{n}: &{n} [{', '.join(['*' + p] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi")]
    bomb.write_text("\n".join(rows) + "\n")
    _one_error_line(run_cli("apply", "--local", "--check", "-e", f"@{bomb}"), 2, r"aliases \(\*name\) are not accepted")


def test_an_oversized_e_file_is_refused_unread(tmp_path):
    big = tmp_path / "big.yml"
    with open(big, "wb") as fh:
        fh.truncate(1 << 30)                   # sparse: 1 GiB that costs no disk
    _one_error_line(run_cli("apply", "--local", "--check", "-e", f"@{big}"), 2, r"larger than 16 MiB")


def test_distinct_host_names_never_share_a_saved_fleet_file():
    from gpuprep.fleet import file_name
    names = ["node@1", "node_1", "node 1", "node/1", "..", ".hidden", "gpu-01"]
    files = [file_name(n) for n in names]
    assert len(set(files)) == len(names) and file_name("gpu-01") == "gpu-01"
    assert all(re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", f) for f in files)


def test_become_method_is_a_plugin_name_and_k_without_a_terminal_is_named():
    _one_error_line(run_cli("apply", "--local", "--check", "--become-method", "sudo;id"), 2, r"--become-method 'sudo;id'")
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "gpuprep", "apply", "--local", "--check", "-K"], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    # getpass's own fallback prompt comes first; then one error line, the last
    assert done.returncode == 2 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "gpuprep: error:" in line]
    assert len(errors) == 1 and "-K: no become password was read" in errors[0]
    assert done.stderr.strip().splitlines()[-1].endswith(errors[0])


def test_a_latin1_profile_and_a_missing_command_are_bad_input(tmp_path):
    profile = tmp_path / "site.toml"
    profile.write_bytes('name = "caf\u00e9"\n'.encode("latin-1"))
    _one_error_line(run_cli("check", "--from", corpus(H100), "--profile", str(profile)), 2, r"site\.toml: not UTF-8 text")
    plan = _plan(tmp_path, lambda d: None)
    import socket
    plan = _plan(tmp_path, lambda d: d.update(host=socket.gethostname()))     # this host's plan: no warning line
    _one_error_line(run_cli("launch", "--plan", str(plan), "--", "/nonexistent/cmd", env={"LOCAL_RANK": "0"}), 2,
                    r"/nonexistent/cmd: no such executable file")


def test_a_truncated_cached_probe_zipapp_is_rebuilt(tmp_path, monkeypatch):
    from gpuprep.zipapp import probe_zipapp
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    import zipfile
    first = probe_zipapp()
    with zipfile.ZipFile(first) as archive:
        members = {(i.filename, i.CRC) for i in archive.infolist()}
    with open(first, "r+b") as fh:
        fh.truncate(os.path.getsize(first) // 2)      # a disk that filled while it was written, in an old version
    assert probe_zipapp() == first
    with zipfile.ZipFile(first) as archive:
        assert archive.testzip() is None and {(i.filename, i.CRC) for i in archive.infolist()} == members


def test_a_timeout_shorter_than_ansible_runners_poll_still_stops_the_run(tmp_path):
    """ansible-runner looked at the clock once per 5 s wait: a run done in 4 s ignored --timeout 2 and exited 0."""
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path))
    done = run_cli("apply", "--local", "--check", "--tags", "nccl_env", "--timeout", "2", "--json", env=env, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert json.loads(done.stdout)["interrupted"] == "timeout after 2 s"


def test_a_kernel_log_above_the_capture_limit_is_scanned_not_refused(tmp_path):
    """Busy nodes log hundreds of megabytes: the real Xid lines buried in 70 MiB of other messages are found
    (read line by line, only GPU lines kept), with the same verdict as the capture alone."""
    real = open(corpus("xid119-dell-xe9680.dmesg.txt")).read()
    filler = "".join(f"[{i / 1000:12.6f}] systemd[1]: Started session-{i}.scope - Session {i} of user ops.\n"
                     for i in range(1, 100001))
    log = tmp_path / "node.dmesg.txt"
    with open(log, "w") as fh:
        for chunk in range(10):
            fh.write(filler)
            if chunk == 5:
                fh.write(real)
    assert log.stat().st_size > 64 << 20
    big = json.loads(run_cli("check", "--from", str(log), "--json").stdout)
    small = json.loads(run_cli("check", "--from", corpus("xid119-dell-xe9680.dmesg.txt"), "--json").stdout)
    assert [(f["id"], f["severity"], f["subject"]) for f in big["findings"]] == \
        [(f["id"], f["severity"], f["subject"]) for f in small["findings"]]
    assert big["verdict"] == "fail"


def test_a_broken_yaml_inventory_names_the_cause_and_the_place(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    a: {x: [1,2}\n")
    _one_error_line(run_cli("apply", "-i", str(inventory), "--check"), 2,
                    r"YAML parsing failed: .* \(at .*hosts\.yml:3:\d+\)")
