"""Bad, hostile and faulty input to every command: each case exits with the code it should (2 for bad input),
says what is wrong in one line, never prints a traceback or "internal error", never hangs (a generous
timeout bounds it), and leaves the files it was pointed at as they were."""
import json
import importlib.util
import os
import socket
import re
import stat

import pytest

from conftest import HOST_GPUS, corpus, run_cli

H100 = "h100-sxm-x8.nvidia-smi.txt"
H100_Q = "h100-sxm-x8.nvidia-smi-q.txt"
A100_Q = "a100-sxm4-x4.nvidia-smi-q.txt"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    q = open(corpus(H100_Q)).read()
    made = {
        "empty": "", "blank": "\n\n  \n", "binary": "\x00\x01\x02garbage", "text": "hello world\n",
        "json_list": "[1, 2]", "json_str": '"text"', "json_broken": '{"schema": "gpuprep.snapshot/1",',
        "snap_noschema": '{"gpus": []}', "snap_future": '{"schema": "gpuprep.snapshot/99"}',
        "snap_other": '{"schema": "something.else/1"}', "snap_badver": '{"schema": "gpuprep.snapshot/x"}',
        "snap_gpu_str": '{"schema": "gpuprep.snapshot/1", "gpus": "abc"}',
        "snap_index_str": '{"schema": "gpuprep.snapshot/1", "gpus": [{"index": "x"}]}',
        "snap_index_bool": '{"schema": "gpuprep.snapshot/1", "gpus": [{"index": true}]}',
        "snap_nan": '{"schema": "gpuprep.snapshot/1", "gpus": [{"index": 0, "temperature_c": NaN}]}',
        "snap_inf": '{"schema": "gpuprep.snapshot/1", "gpus": [{"index": 0, "power_draw_w": Infinity}]}',
        "snap_negative_ecc": '{"schema": "gpuprep.snapshot/1", "gpus": [{"index": 0, "ecc_volatile_uncorrected": -3}]}',
        "snap_negative_pages": '{"schema": "gpuprep.snapshot/1", "gpus": [{"index": 1, "retired_pages_double_bit": -64}]}',
        "snap_gpu_list": '{"schema": "gpuprep.snapshot/1", "gpus": [[1]]}',
        "snap_system_list": '{"schema": "gpuprep.snapshot/1", "system": [1]}',
        "xml_broken": "<nvidia_smi_log><gpu id='0'>", "xml_entity": '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">'
        '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]><nvidia_smi_log>&b;</nvidia_smi_log>',
        "xml_external": '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
                        '<nvidia_smi_log><driver_version>&e;</driver_version></nvidia_smi_log>',
        "toml_bad": "min_gpus = [", "toml_str": 'min_gpus = "8"', "toml_neg": "min_gpus = -3", "toml_empty": "[node]\n",
        "toml_bool": "require_ecc = 1", "toml_unknown": "min_gpu = 8", "toml_desc": "description = 5\nmin_gpus = 1",
        "toml_table_value": "min_gpus = {a = 1}",
        "half_q": q[:len(q) // 3],
    }
    paths = {}
    for name, text in made.items():
        path = d / f"{name}.txt"
        path.write_text(text)
        paths[name] = str(path)
    os.mkfifo(d / "fifo")
    paths["fifo"] = str(d / "fifo")
    paths["dir"] = str(d)
    unreadable = d / "unreadable.txt"
    unreadable.write_text(open(corpus(H100)).read())
    unreadable.chmod(0)
    paths["unreadable"] = str(unreadable)
    (d / "good.json").write_text('{"keep": true}\n')
    paths["good"] = str(d / "good.json")
    readonly = d / "readonly"
    readonly.mkdir()
    readonly.chmod(stat.S_IRUSR | stat.S_IXUSR)
    paths["readonly_dir"] = str(readonly)
    holder = socket.socket()                  # a port some other job holds, for the burn-in's rendezvous
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    _HELD.append(holder)
    paths["taken_port"] = holder.getsockname()[1]
    return paths


_HELD = []


def _p(name):
    return lambda f: f[name]


C = corpus
# (id, argv builder, expected exit code, a regex the one-line message must match)
CASES = [
    # check --from: files that are not captures
    ("from-missing", lambda f: ["check", "--from", "/nonexistent/x.txt"], 2, r"cannot read"),
    ("from-empty", lambda f: ["check", "--from", f["empty"]], 2, r"unrecognised file"),
    ("from-blank", lambda f: ["check", "--from", f["blank"]], 2, r"unrecognised file"),
    ("from-binary", lambda f: ["check", "--from", f["binary"]], 2, r"binary file"),
    ("from-text", lambda f: ["check", "--from", f["text"]], 2, r"unrecognised file"),
    # a directory is a saved fleet (snapshot -i -o DIR): each *.json in it must be a snapshot
    ("from-dir", lambda f: ["check", "--from", f["dir"]], 2, r"good\.json: not a gpuprep snapshot"),
    ("from-empty-dir", lambda f: ["check", "--from", f["readonly_dir"]], 2, r"no snapshot files"),
    ("snapshot-dir-to-from", lambda f: ["snapshot", "--from", f["dir"]], 2, r"a directory"),
    ("fleet-inventory-and-from", lambda f: ["check", "-i", "localhost,", "--from", C(H100)], 2, r"either -i"),
    ("fleet-missing-inventory", lambda f: ["check", "-i", "/nonexistent/inventory.yml"], 2, r"no such file"),
    ("fleet-snapshot-needs-dir", lambda f: ["snapshot", "-i", "localhost,"], 2, r"needs -o DIR"),
    ("fleet-snapshot-o-file", lambda f: ["snapshot", "-i", "localhost,", "-o", f["good"]], 2, r"needs -o DIR"),
    ("drift-single-host", lambda f: ["check", "--from", C(H100), "--drift"], 2, r"compares hosts"),
    ("baseline-not-a-file", lambda f: ["check", "--from", C(H100), "--baseline", "gpu-node-01"], 2, r"a snapshot file"),
    ("format-unknown", lambda f: ["check", "--from", C(H100), "--format", "yaml"], 2, r"--format"),
    ("format-contradiction", lambda f: ["check", "--from", C(H100), "--json", "--format", "html"], 2, r"contradict"),
    ("format-o-missing-dir", lambda f: ["check", "--from", C(H100), "--format", "html", "-o", "/nonexistent/r.html"],
     2, r"does not exist"),
    ("zipapp-o-missing-dir", lambda f: ["zipapp", "-o", "/nonexistent/dir/p.pyz"], 2, r"does not exist"),
    ("from-fifo", lambda f: ["check", "--from", f["fifo"]], 2, r"not a regular file"),
    ("from-dev-zero", lambda f: ["check", "--from", "/dev/zero"], 2, r"not a regular file"),
    ("from-dev-null", lambda f: ["check", "--from", "/dev/null"], 2, r"not a regular file"),
    ("from-proc-dir", lambda f: ["check", "--from", "/proc/self"], 2, r"directory"),
    ("from-json-list", lambda f: ["check", "--from", f["json_list"]], 2, r"unrecognised file"),
    ("from-json-str", lambda f: ["check", "--from", f["json_str"]], 2, r"unrecognised file"),
    ("from-json-broken", lambda f: ["check", "--from", f["json_broken"]], 2, r"not valid JSON"),
    ("snap-noschema", lambda f: ["check", "--from", f["snap_noschema"]], 2, r"no 'schema' field"),
    ("snap-future", lambda f: ["check", "--from", f["snap_future"]], 2, r"newer than this gpuprep"),
    ("snap-other", lambda f: ["check", "--from", f["snap_other"]], 2, r"unknown snapshot schema"),
    ("snap-badver", lambda f: ["check", "--from", f["snap_badver"]], 2, r"unknown snapshot schema"),
    ("snap-gpus-str", lambda f: ["check", "--from", f["snap_gpu_str"]], 2, r"malformed snapshot: gpus: expected a list"),
    ("snap-index-str", lambda f: ["check", "--from", f["snap_index_str"]], 2, r"malformed snapshot: gpus\[0\]\.index: expected int"),
    ("snap-index-bool", lambda f: ["check", "--from", f["snap_index_bool"]], 2, r"malformed snapshot: gpus\[0\]\.index: expected int"),
    ("snap-nan", lambda f: ["check", "--from", f["snap_nan"]], 2, r"malformed snapshot"),
    ("snap-inf", lambda f: ["check", "--from", f["snap_inf"]], 2, r"malformed snapshot: [a-z_\[\]0-9.]+: expected a finite"),
    ("snap-negative-ecc", lambda f: ["check", "--from", f["snap_negative_ecc"]], 2,
     r"gpus\[0\]\.ecc_volatile_uncorrected = -3: cannot be negative"),
    ("snap-negative-pages", lambda f: ["check", "--from", f["snap_negative_pages"]], 2,
     r"retired_pages_double_bit = -64: cannot be negative"),
    ("snap-gpu-list", lambda f: ["check", "--from", f["snap_gpu_list"]], 2, r"malformed snapshot"),
    ("snap-system-list", lambda f: ["check", "--from", f["snap_system_list"]], 2, r"malformed snapshot"),
    ("xml-broken", lambda f: ["check", "--from", f["xml_broken"]], 2, r"malformed nvidia-smi XML"),
    ("xml-entity-bomb", lambda f: ["check", "--from", f["xml_entity"]], 2, r"XML|unrecognised"),
    ("xml-external-entity", lambda f: ["check", "--from", f["xml_external"]], 2, r"XML|unrecognised"),
    ("from-unreadable", lambda f: ["check", "--from", f["unreadable"]], None, r"cannot read|Permission"),
    ("mixed-hosts", lambda f: ["check", "--from", C(H100_Q), "--from", C(A100_Q)], 2, r"not the same host.*--allow-mixed"),
    ("snapshot-mixed-hosts", lambda f: ["snapshot", "--from", C(H100_Q), "--from", C(A100_Q)], 2, r"not the same host"),
    # check filters: a typo must never turn a failing capture into OK
    ("only-typo-area", lambda f: ["check", "--from", C(A100_Q), "--only", "gpus"], 2, r"--only 'gpus' is no check id or area"),
    ("only-empty", lambda f: ["check", "--from", C(A100_Q), "--only", ""], 2, r"--only '' is no check"),
    ("only-unknown-id", lambda f: ["check", "--from", C(A100_Q), "--only", "gpu.nope"], 2, r"no check id or area"),
    ("skip-unknown-id", lambda f: ["check", "--from", C(A100_Q), "--skip", "gpu.row-remap-pending"], 2, r"--skip"),
    ("skip-typo-area", lambda f: ["check", "--from", C(A100_Q), "--skip", "gpus"], 2, r"--skip 'gpus'"),
    ("skip-only-same", lambda f: ["check", "--from", C(A100_Q), "--skip", "gpu", "--only", "gpu"], 2, r"leaves no check"),
    ("skip-only-same-id", lambda f: ["check", "--from", C(A100_Q), "--skip", "gpu.row-remap", "--only", "gpu.row-remap"],
     2, r"leaves no check"),
    ("only-case", lambda f: ["check", "--from", C(A100_Q), "--only", "GPU"], 2, r"no check id or area"),
    # profiles
    ("profile-unknown", lambda f: ["check", "--from", C(H100), "--profile", "nope"], 2, r"unknown profile"),
    ("profile-missing-file", lambda f: ["check", "--from", C(H100), "--profile", "/nonexistent.toml"], 2, r"cannot read profile"),
    ("profile-bad-toml", lambda f: ["check", "--from", C(H100), "--profile", f["toml_bad"] + ".toml"], 2, r"cannot read profile"),
    ("profile-str", lambda f: _toml(f, "toml_str"), 2, r"min_gpus = '8': expected a number"),
    ("profile-negative", lambda f: _toml(f, "toml_neg"), 2, r"expected a number >= 0"),
    ("profile-empty-table", lambda f: _toml(f, "toml_empty"), 2, r"defines no requirement"),
    ("profile-int-for-bool", lambda f: _toml(f, "toml_bool"), 2, r"expected true or false"),
    ("profile-unknown-key", lambda f: _toml(f, "toml_unknown"), 2, r"unknown key"),
    ("profile-desc-number", lambda f: _toml(f, "toml_desc"), 2, r"expected text"),
    ("profile-table-value", lambda f: _toml(f, "toml_table_value"), 2, r"unknown key"),   # read as a table named min_gpus
    # snapshot -o
    ("snapshot-o-missing-dir", lambda f: ["snapshot", "--from", C(H100), "-o", "/nonexistent/dir/s.json"], 2,
     r"does not exist"),
    ("snapshot-o-dir", lambda f: ["snapshot", "--from", C(H100), "-o", f["dir"]], 2, r"is a directory"),
    ("snapshot-o-readonly", lambda f: ["snapshot", "--from", C(H100), "-o", f["readonly_dir"] + "/s.json"], None,
     r"not writable|cannot write"),
    ("snapshot-bad-from", lambda f: ["snapshot", "--from", f["binary"], "-o", f["good"]], 2, r"binary file"),
    # compat
    ("compat-no-driver", lambda f: ["compat"], 2, r"--driver"),
    ("compat-driver-word", lambda f: ["compat", "--driver", "abc", "--cuda", "12.4"], 2, r"not a driver version"),
    ("compat-driver-injection", lambda f: ["compat", "--driver", "535; rm -rf /", "--cuda", "12.4"], 2, r"not a driver version"),
    ("compat-cuda-word", lambda f: ["compat", "--driver", "535.104.05", "--cuda", "abc"], 2, r"not a CUDA version"),
    ("compat-cuda-huge", lambda f: ["compat", "--driver", "535.104.05", "--cuda", "99.9"], 2, r"not a CUDA version"),
    ("compat-torch-cu999", lambda f: ["compat", "--driver", "535.104.05", "--torch", "2.5.1+cu999"], 2, r"not a CUDA variant"),
    ("compat-torch-novariant", lambda f: ["compat", "--driver", "535.104.05", "--torch", "2.5.1"], 2, r"needs its variant"),
    ("compat-cudnn-word", lambda f: ["compat", "--driver", "535.104.05", "--cuda", "12.4", "--cudnn", "x"], 2,
     r"not a cuDNN version"),
    ("compat-cudnn-alone", lambda f: ["compat", "--driver", "535.104.05", "--cudnn", "9.1.0"], 2, r"--cudnn needs"),
    ("compat-gpu-unknown", lambda f: ["compat", "--driver", "535.104.05", "--torch", "2.5.1+cu124", "--gpu", "Voodoo 5"],
     2, r"not in gpuprep's GPU table"),
    ("compat-cc-word", lambda f: ["compat", "--driver", "535.104.05", "--torch", "2.5.1+cu124", "--cc", "nine"], 2,
     r"not a compute capability"),
    ("compat-nothing", lambda f: ["compat", "--driver", "535.104.05"], 2, r"nothing to judge"),
    # nccl-env: values that would run code or break a login shell are refused before anything is written
    ("nccl-ifname-subst", lambda f: ["nccl-env", "--socket-ifname", "$(touch /tmp/gpuprep-pwned)"], 2, r"NCCL_SOCKET_IFNAME"),
    ("nccl-ifname-semicolon", lambda f: ["nccl-env", "--socket-ifname", "eth0;reboot"], 2, r"NCCL_SOCKET_IFNAME"),
    ("nccl-ifname-space", lambda f: ["nccl-env", "--socket-ifname", "eth 0"], 2, r"NCCL_SOCKET_IFNAME"),
    ("nccl-set-newline", lambda f: ["nccl-env", "--set", "NCCL_DEBUG=WARN\nreboot"], 2, r"control character"),
    ("nccl-set-bad-name", lambda f: ["nccl-env", "--set", "1BAD=x"], 2, r"not a valid environment variable name"),
    ("nccl-set-name-subst", lambda f: ["nccl-env", "--set", "$(id)=x"], 2, r"not a valid environment variable name"),
    ("nccl-set-no-equals", lambda f: ["nccl-env", "--set", "NCCL_DEBUG"], 2, r"expected KEY=VALUE"),
    ("nccl-set-omp-word", lambda f: ["nccl-env", "--set", "OMP_NUM_THREADS=many"], 2, r"positive whole number"),
    ("nccl-set-omp-zero", lambda f: ["nccl-env", "--set", "OMP_NUM_THREADS=0"], 2, r"positive whole number"),
    ("nccl-set-ib-disable", lambda f: ["nccl-env", "--set", "NCCL_IB_DISABLE=yes"], 2, r"0 or 1"),
    ("nccl-set-hca-space", lambda f: ["nccl-env", "--set", "NCCL_IB_HCA=mlx5_0 mlx5_1"], 2, r"NCCL_IB_HCA"),
    ("nccl-set-tab", lambda f: ["nccl-env", "--set", "NCCL_DEBUG_FILE=a\tb"], 2, r"control character"),
    ("nccl-from-binary", lambda f: ["nccl-env", "--from", f["binary"]], 2, r"binary file"),
    # burnin: checked before anything runs
    ("burnin-duration-word", lambda f: ["burnin", "--duration", "soon"], 2, r"not a duration"),
    ("burnin-master-port-taken", lambda f: ["burnin", "--nnodes", "2", "--node-rank", "0", "--master",
                                            f"127.0.0.1:{f['taken_port']}", "--duration", "5s"], 2,
     r"port \d+ is not free on this host.*choose another port"),
    ("burnin-duration-short", lambda f: ["burnin", "--duration", "1s"], 2, r"between 5s and 24h"),
    ("burnin-duration-long", lambda f: ["burnin", "--duration", "100h"], 2, r"between 5s and 24h"),
    ("burnin-duration-negative", lambda f: ["burnin", "--duration", "-5s"], 2, r"between 5s and 24h|not a duration"),
    ("burnin-duration-nan", lambda f: ["burnin", "--duration", "nans"], 2, r"between 5s and 24h|not a duration"),
    ("burnin-o-missing-dir", lambda f: ["burnin", "--duration", "10s", "-o", "/nonexistent/dir/r.json"], 2, r"does not exist"),
    ("burnin-o-dir", lambda f: ["burnin", "--duration", "10s", "-o", f["dir"]], 2, r"is a directory"),
    ("burnin-node-rank", lambda f: ["burnin", "--nnodes", "2", "--node-rank", "2", "--master", "127.0.0.1:29500"], 2,
     r"must be below --nnodes"),
    ("burnin-nnodes-no-master", lambda f: ["burnin", "--nnodes", "2"], 2, r"needs --master"),
    ("burnin-nproc-word", lambda f: ["burnin", "--nproc", "lots", "--duration", "10s"], 2, r"--nproc"),
    ("burnin-nproc-zero", lambda f: ["burnin", "--nproc", "0", "--duration", "10s"], 2, r"--nproc"),
    ("burnin-backend", lambda f: ["burnin", "--backend", "mpi"], 2, r"--backend"),
    ("burnin-nccl-no-gpu", lambda f: ["burnin", "--backend", "nccl", "--duration", "10s"], 2, r"needs NVIDIA GPUs"),
    ("burnin-rdzv-timeout", lambda f: ["burnin", "--rdzv-timeout", "1"], 2, r"rdzv-timeout"),
    # apply / revert: refused before any host is touched
    ("apply-no-target", lambda f: ["apply"], 2, r"-i|--local"),
    ("apply-both-targets", lambda f: ["apply", "--local", "-i", "localhost,"], 2, r"either -i INVENTORY or --local"),
    ("apply-missing-inventory", lambda f: ["apply", "-i", "/nonexistent/inventory.yml"], 2, r"no such file"),
    ("apply-unknown-tag", lambda f: ["apply", "--local", "--tags", "gpu_clock"], 2, r"unknown tag"),
    ("apply-unknown-skip-tag", lambda f: ["apply", "--local", "--skip-tags", "everything"], 2, r"unknown tag"),
    ("apply-tag-injection", lambda f: ["apply", "--local", "--tags", "nccl_env;id"], 2, r"unknown tag"),
    ("apply-bad-extravar", lambda f: ["apply", "--local", "-e", "novalue"], 2, r"expected KEY=VALUE"),
    ("apply-bad-extravar-key", lambda f: ["apply", "--local", "-e", "a b=1"], 2, r"expected KEY=VALUE"),
    ("apply-forks-zero", lambda f: ["apply", "--local", "--forks", "0"], 2, r"--forks"),
    ("apply-empty-limit", lambda f: ["apply", "-i", "localhost,", "--limit", "nomatch"], 2, r"no hosts"),
    ("revert-no-target", lambda f: ["revert"], 2, r"-i|--local"),
    ("revert-missing-inventory", lambda f: ["revert", "-i", "/nonexistent/inventory.yml"], 2, r"no such file"),
    # the command line itself
    ("unknown-command", lambda f: ["chekc"], 2, r"No such command"),
    ("unknown-option", lambda f: ["check", "--frm", "x"], 2, r"No such option"),
    ("missing-option-value", lambda f: ["check", "--from"], 2, r"requires an argument"),
    # watch -i: the rendezvous the job's ranks meet at is an address and a port, and the watch a bounded one
    ("watch-inventory-no-master", lambda f: ["watch", "-i", "localhost,", "--duration", "5"], 2, r"give both"),
    ("watch-inventory-no-duration", lambda f: ["watch", "-i", "localhost,", "--master", "127.0.0.1:29500"], 2,
     r"give --duration"),
    ("watch-master-not-addr-port", lambda f: ["watch", "-i", "localhost,", "--master", "127.0.0.1", "--duration", "5"],
     2, r"MASTER_ADDR:MASTER_PORT"),
    ("watch-master-injected", lambda f: ["watch", "-i", "localhost,", "--master", "x;touch /tmp/gpuprep-pwned:1",
                                         "--duration", "5"], 2, r"MASTER_ADDR:MASTER_PORT"),
    ("burnin-master-template", lambda f: ["burnin", "-i", "localhost,", "--master", "{{ 7*7 }}:29500",
                                          "--duration", "10s"], 2, r"is not HOST:PORT"),
    ("watch-node-of-port-out-of-range", lambda f: ["watch", "--node-of", "127.0.0.1:70000", "--duration", "1"], 2,
     r"MASTER_ADDR:MASTER_PORT"),
]


def _toml(f, name):
    path = f[name].replace(".txt", ".toml")
    if not os.path.exists(path):
        os.link(f[name], path)
    return ["check", "--from", corpus(H100), "--profile", path]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_line(case, files):
    name, argv, code, message = case
    if name == "from-unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a mode-0 file")
    if name == "snapshot-o-readonly" and os.geteuid() == 0:
        pytest.skip("root writes into a read-only directory")
    if name == "burnin-nccl-no-gpu" and HOST_GPUS:
        pytest.skip("this host has NVIDIA GPUs")
    if name == "burnin-master-port-taken" and importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch: without it the burn-in stops first at the missing torch, as it should")
    before = open(files["good"]).read()
    done = run_cli(*argv(files), timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == (code if code is not None else 2), done.stderr + done.stdout[-500:]
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert len(lines) >= 1 and re.search(message, lines[-1]), done.stderr
    assert len([l for l in lines if l.startswith(("gpuprep: error:", "Error:"))]) == 1
    assert open(files["good"]).read() == before
    assert not os.path.exists("/tmp/gpuprep-pwned")


def test_a_truncated_capture_is_not_healthy(files, tmp_path):
    """Cut inside a GPU's block it is refused (the cut GPU's missing fields would read as unknown); cut between
    GPUs, fewer GPUs than `Attached GPUs` says is gpu.capture-incomplete."""
    done = run_cli("check", "--json", "--from", files["half_q"])
    assert done.returncode == 2 and "cut short inside its last GPU" in done.stderr, done.stderr
    text = open(corpus(H100_Q)).read()
    fourth = [i for i in range(len(text)) if text.startswith("\nGPU 0000", i)][3]
    between = tmp_path / "three-gpus.txt"
    between.write_text(text[:fourth + 1])
    doc = json.loads(run_cli("check", "--json", "--from", str(between)).stdout)
    incomplete = [f for f in doc["findings"] if f["id"] == "gpu.capture-incomplete"]
    assert incomplete and incomplete[0]["evidence"]["attached_gpus"] == 8
    assert doc["verdict"] in ("warn", "fail") and incomplete[0]["evidence"]["missing"] >= 1


def test_waived_failures_are_named(files):
    done = run_cli("check", "--from", corpus(A100_Q), "--skip", "gpu.row-remap")
    assert done.returncode == 0
    assert "waived by --skip/--only: 1 fail" in done.stdout and "gpu.row-remap" in done.stdout.splitlines()[-1]


def test_a_capture_in_utf16_with_crlf_reads_like_the_original(tmp_path):
    text = open(corpus(H100)).read().replace("\n", "\r\n")
    path = tmp_path / "windows.txt"
    path.write_bytes(text.encode("utf-16"))
    done = run_cli("check", "--json", "--from", str(path))
    assert done.returncode == 0 and len(json.loads(done.stdout)["snapshot"]["gpus"]) == 8


def test_a_failed_write_keeps_the_previous_file(files, tmp_path):
    target = tmp_path / "snap.json"
    target.write_text("previous good snapshot\n")
    done = run_cli("snapshot", "--from", files["binary"], "-o", str(target))
    assert done.returncode == 2 and target.read_text() == "previous good snapshot\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap.json"]      # no temporary file left


def test_errors_are_a_json_document_under_json(files):
    for args in (["check", "-i", "/nonexistent/inventory.yml", "--json"],
                 ["check", "--from", files["binary"], "--format", "json"],
                 ["burnin", "--duration", "1s", "--json"]):
        done = run_cli(*args)
        doc = json.loads(done.stdout)
        assert done.returncode == 2 and doc["schema"] == "gpuprep.error/1" and doc["exit_code"] == 2, args
        assert doc["error"] == done.stderr.strip().removeprefix("gpuprep: error: ")


def test_two_snapshots_of_one_host_are_not_a_fleet(tmp_path):
    text = run_cli("snapshot", "--from", corpus(H100)).stdout
    data = json.loads(text)
    data["system"]["hostname"] = "same"
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(data))
    done = run_cli("check", "--from", str(tmp_path))
    assert done.returncode == 2 and "already in this fleet" in done.stderr
