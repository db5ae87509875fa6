"""`-e` in the forms ansible-playbook takes: pairs (several in one), a JSON/YAML mapping, @file; bad forms refused."""
import pytest

from gpuprep.ansible.runner import parse_extravars
from gpuprep.errors import BadInput


def test_pairs_mappings_and_files_combine_in_order(tmp_path):
    vars_file = tmp_path / "site.yml"
    vars_file.write_text("gpu_clocks_power_limit_w: 650\nnccl_env_overrides: {NCCL_DEBUG: INFO}\n")
    got = parse_extravars(["a=1 b='two words'", '{"c": [1, 2], "a": 3}', f"@{vars_file}",
                           "gpu_clocks_power_limit_w=600", "nccl_env_overrides={NCCL_DEBUG: WARN, NCCL_ALGO: Ring}"])
    assert got == {"a": 3, "b": "two words", "c": [1, 2], "gpu_clocks_power_limit_w": 600,
                   "nccl_env_overrides": {"NCCL_DEBUG": "WARN", "NCCL_ALGO": "Ring"}}


@pytest.mark.parametrize("value, message", [
    ("novalue", "expected KEY=VALUE"),
    ("1bad=2", "expected KEY=VALUE"),
    ("a='unclosed", "No closing quotation"),
    ("{not: [valid", "not valid JSON/YAML"),
    ('{"a b": 1}', "mapping of variable names"),
    ("@", "expected @FILE"),
    ("@/nonexistent/vars.yml", "cannot read"),
])
def test_bad_forms_are_refused_with_the_reason(value, message):
    with pytest.raises(BadInput, match=message):
        parse_extravars([value])


def test_a_vars_file_that_is_not_a_mapping_is_refused(tmp_path):
    path = tmp_path / "list.yml"
    path.write_text("- a\n- b\n")
    with pytest.raises(BadInput, match="mapping"):
        parse_extravars([f"@{path}"])


def test_only_the_newest_runs_are_kept(tmp_path):
    """GPUPREP_KEEP_RUNS: ansible-runner rotates the run directories (here through check -i on this machine)."""
    import os
    import sys

    from conftest import run_cli
    inventory = tmp_path / "local.ini"
    inventory.write_text(f"here ansible_connection=local ansible_python_interpreter={sys.executable} "
                         "gpuprep_check_become=false\n")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"), GPUPREP_KEEP_RUNS="2")
    for _ in range(3):
        done = run_cli("check", "-i", str(inventory), "--json", env=env, timeout=300)
        assert done.returncode in (0, 1), done.stderr[-2000:]
    assert len(os.listdir(tmp_path / "state" / "gpuprep" / "runs")) == 2


def test_verbose_streams_ansibles_output_with_secrets_redacted(tmp_path):
    """-vv: Ansible's own output on stderr as it comes; an -e value never shows, in it or in the artifacts."""
    import os
    import secrets

    from conftest import run_cli
    secret = "s3cr3t-" + secrets.token_hex(6)
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    done = run_cli("apply", "--local", "--check", "--tags", "nccl_env", "-e", f"nccl_env_overrides={{NCCL_DEBUG: {secret}}}",
                   "-vv", env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "nccl_env : Compute the environment]" in done.stderr and "<redacted>" in done.stderr
    assert secret not in done.stderr + done.stdout
    for folder, _, names in os.walk(tmp_path / "state"):
        for name in names:
            assert secret not in open(os.path.join(folder, name), errors="replace").read()


def test_run_timeout_cancels_a_hung_run_and_says_where_each_host_was(tmp_path):
    """--timeout: a host whose Python never answers (here an interpreter that sleeps) is stopped at the limit,
    the summary marks it interrupted where it was (the interpreter leaves a mark once Ansible reached it: on a
    loaded machine the limit may come before), nothing of the run lives on, exit 1."""
    import json
    import os

    import psutil

    from conftest import run_cli
    hung = tmp_path / "hung-python"
    reached = tmp_path / "reached"
    hung.write_text(f"#!/bin/sh\ntouch {reached}\nsleep 607\n")
    hung.chmod(0o755)
    inventory = tmp_path / "hung.ini"
    inventory.write_text(f"stuck ansible_connection=local ansible_python_interpreter={hung}\n")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    done = run_cli("apply", "-i", str(inventory), "--tags", "nccl_env", "--timeout", "5", "--json", env=env, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["interrupted"] == "timeout after 5 s" and doc["hosts"]["stuck"]["interrupted"]
    where = doc["hosts"]["stuck"]["interrupted_at"]
    assert where == "Gathering Facts" if reached.exists() else where in ("Gathering Facts", "(not started)")
    left = [p.pid for p in psutil.process_iter(["cmdline"])
            if str(hung) in " ".join(p.info["cmdline"] or []) or p.info["cmdline"] == ["sleep", "607"]]
    assert left == []


def test_no_encoding_of_any_e_value_survives_in_output_or_artifacts(tmp_path):
    """Values with quotes and backslashes, non-ASCII text and a bare number: none may be recovered from the run's
    artifacts or the -vvvv stream in any encoding (raw, JSON, JSON inside JSON as the `command` artifact holds
    it, Python repr); gpuprep's own variables are not redacted."""
    import json
    import os
    import secrets

    from conftest import run_cli
    tag = secrets.token_hex(4)
    values = {"q": f'say "hi" {tag}', "b": f"C:\\dir\\{tag}", "u": f"geheim-ß-ключ-{tag}",
              "n": int("7" + str(int(tag, 16))[:8])}
    extra = json.dumps({f"gpuprep_test_{k}": v for k, v in values.items()})
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    done = run_cli("apply", "--local", "--check", "--tags", "nccl_env", "-e", extra, "-vvvv", env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    forms = set()
    for value in values.values():
        text = str(value)
        for form in (text, json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1], repr(text)[1:-1]):
            forms |= {form, json.dumps(form)[1:-1], json.dumps(form, ensure_ascii=False)[1:-1]}
    seen = [done.stderr + done.stdout]
    for folder, _, names in os.walk(tmp_path / "state"):
        seen += [open(os.path.join(folder, name), errors="replace").read() for name in names]
    leaked = [form for form in forms if len(form) >= 3 and any(form in text for text in seen)]
    assert leaked == []


def _rotate_at_once(root, keep, barrier, errors):
    from gpuprep.ansible.runner import rotate_runs
    barrier.wait()
    try:
        rotate_runs(root, keep)
    except OSError as exc:
        errors.put(repr(exc))


def test_runs_rotating_at_once_neither_raise_nor_keep_too_many(tmp_path):
    """Two applies started in one second both rotate the run directories. ansible-runner's rotation raised in its
    thread when the other removed a directory between its listing and its stat, and the run hung, never started.
    Here four processes rotate one root of 400 runs at the same moment."""
    import multiprocessing
    import os
    root = tmp_path / "runs"
    for i in range(400):
        (root / f"20261129-0754{i:04d}-1" / "job_events").mkdir(parents=True)
        os.utime(root / f"20261129-0754{i:04d}-1", (i, i))
    ctx = multiprocessing.get_context("fork")
    barrier, errors = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_rotate_at_once, args=(str(root), 10, barrier, errors)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert [proc.exitcode for proc in procs] == [0, 0, 0, 0] and errors.empty()
    assert sorted(os.listdir(root)) == [f"20261129-0754{i:04d}-1" for i in range(390, 400)]     # the newest


def test_a_tmpdir_too_long_for_mitogens_socket_runs_without_it_and_never_hangs(tmp_path):
    """Mitogen puts its socket in TMPDIR; past 107 bytes a socket cannot be bound there, and its mux crashed while
    the run waited on it for ever. The run goes on with Ansible's own strategy."""
    from conftest import run_cli
    long_tmp = tmp_path / ("d" * (120 - len(str(tmp_path))))
    long_tmp.mkdir()
    done = run_cli("apply", "--local", "--check", "--tags", "nccl_env", timeout=300,
                   env={"TMPDIR": str(long_tmp), "XDG_STATE_HOME": str(tmp_path / "state")})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "AF_UNIX path too long" not in done.stdout + done.stderr
