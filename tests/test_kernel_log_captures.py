"""Real kernel-log pastes of failing nodes (tests/data/broken, provenance in PROVENANCE.tsv), in the shapes
people paste them: dmesg with and without timestamps, `dmesg --ctime`, journalctl -k, syslog and Talos
prefixes, NVRM continuation lines, an Xid line that is not the last line. Each is recognised as a kernel
log, every Xid is read with its bus id, and `check` fails or warns as NVIDIA's catalog says."""
import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import run_cli

DATA = Path(__file__).parent / "data" / "broken"

# (code, bus id) -> lines, read off each file by hand (grep -c of its Xid lines)
EXPECTED = {
    "chia-gigahorse-301-xid31-62-45": {(31, "0000:0a:00"): 1, (45, "0000:0a:00"): 8, (62, "0000:0a:00"): 1},
    "dcgm-144-a40-xid119-gsp-rpc-timeout": {(119, "0000:07:00"): 1},
    "dxvk-1799-xid31-journalctl-k": {(31, "0000:c1:00"): 2},
    "gpu-operator-1146-xid48-dbe-xid64-rminit-failed": {(48, "0000:07:00"): 1, (64, "0000:07:00"): 1},
    "gpud-pr117-xid45": {(45, "0000:61:00"): 6},
    "gpud-pr1174-nvlink-xid149-145": {(145, "0018:01:00"): 1, (149, "0019:01:00"): 1},
    "gpud-pr46-xid13-xid109": {(13, "0000:cb:00"): 3, (109, "0000:cb:00"): 1},
    "gpud-xid119-gsp-timeout-xe9680": {(119, "0000:9b:00"): 5},
    "mleng-a100-xid63-row-remapper": {(63, "0000:10:1c"): 1},
    "nvsentinel-155-fallen-off-bus-no-xid": {(79, "0000:b3:00"): 1},      # multi-line, no Xid number: Xid 79
    "ogkm-1150-xid45-after-xid149-145": {(45, "0000:97:00"): 1, (45, "0000:ba:00"): 2, (45, "0000:dc:00"): 2,
                                         (45, "0000:ed:00"): 2},
    "ogkm-363-xid31-no-timestamp": {(31, "0000:08:00"): 2},
    "ogkm-446-talos-xid154-gsp-timeout-reset-required": {(154, "0000:0b:00"): 1},
    "ogkm-829-xid120-gsp-crashcat-journal": {(120, "0000:02:00"): 1},
}
# the Xids NVIDIA's catalog says need a reset, a reboot or an investigation fail the node
FAILING = {"chia-gigahorse-301-xid31-62-45", "dcgm-144-a40-xid119-gsp-rpc-timeout", "gpud-xid119-gsp-timeout-xe9680",
           "gpu-operator-1146-xid48-dbe-xid64-rminit-failed", "gpud-pr1174-nvlink-xid149-145", "gpud-pr46-xid13-xid109",
           "nvsentinel-155-fallen-off-bus-no-xid", "ogkm-829-xid120-gsp-crashcat-journal"}


def test_each_listed_paste_is_there():
    files = {p.name.split(".")[0] for p in DATA.glob("*.dmesg.txt")}
    assert set(EXPECTED) <= files          # every capture's verdict is in tests/test_broken_captures.py


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_kernel_log_paste_is_read_whole(name):
    done = run_cli("check", "--json", "--from", str(DATA / f"{name}.dmesg.txt"))
    assert done.returncode in (0, 1), done.stderr
    doc = json.loads(done.stdout)
    seen = Counter((x["code"], x["pci"]) for x in doc["snapshot"]["xids"] if x["kind"] == "xid")
    assert seen == Counter(EXPECTED[name])
    if name in FAILING:
        assert done.returncode == 1 and doc["verdict"] == "fail"
        assert any(f["id"] == "gpu.xid" and f["severity"] == "fail" and any(bus in f["subject"] for _, bus in EXPECTED[name])
                   for f in doc["findings"])
