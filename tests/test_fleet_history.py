"""Issue 46: a GPU judged against its peers across the fleet's history. Burn-in reports kept in the results store
(SQLite), one GPU's figures lowered in a report of its host's later run, and `gpuprep fleet report` naming it;
`burnin --compare-fleet` judging a run against the store."""
import copy
import datetime as dt
import json

from conftest import run_cli
from gpuprep import api
from gpuprep.burnin.peers import against_fleet, fleet_report
from gpuprep.store import history, rows_of


def _report(host, when, compute, uuids):
    """A burn-in report as `burnin --json` writes it, for one host's 8 GPUs (numbers given per GPU)."""
    ranks = [{"rank": i, "world_size": 8, "host": host, "device": f"cuda:{i}", "gpu_name": "NVIDIA H100 80GB HBM3",
              "gpu_uuid": uuids[i], "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", "steps": 40,
              "compute_ms": [compute[i]] * 40, "step_ms": [compute[i] * 1.3] * 40,
              "allreduce": [{"bytes": 1 << 30, "busbw_gbs": 400.0}], "memory": {"ok": True}} for i in range(8)]
    return {"schema": "gpuprep.burnin/1", "verdict": "pass", "generated_at": when.isoformat(), "ranks": ranks}


def _fleet(store, slow_gpu=None, dropped=None):
    """Four hosts x 8 H100s, three runs each a day apart; `slow_gpu` (host, index) slower in every run; `dropped`
    (host, index) slower in its last run only."""
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=5)
    for run in range(3):
        for h in range(4):
            host = f"gpu-node-{h:02d}"
            compute = [100.0 + (i + h + run) % 3 * 0.4 for i in range(8)]
            if slow_gpu and slow_gpu[0] == h:
                compute[slow_gpu[1]] = 118.0
            if dropped and dropped[0] == h and run == 2:
                compute[dropped[1]] = 121.0
            uuids = [f"GPU-{h:02d}{i:02d}-aaaa" for i in range(8)]
            api.store_burnin(_report(host, start + dt.timedelta(days=run, minutes=h), compute, uuids), str(store))


def test_the_persistently_slow_gpu_is_named_with_its_host_and_uuid(tmp_path):
    store = tmp_path / "results.sqlite"
    _fleet(store, slow_gpu=(2, 5))
    found = [f for f in fleet_report(history(str(store))) if f.severity == "warn"]
    assert [(f.id, f.evidence["host"], f.evidence["gpu"]) for f in found] == \
        [("fleet.slow-gpu", "gpu-node-02", "GPU-0205-aaaa")]
    done = run_cli("fleet", "report", str(store), "--json")
    doc = json.loads(done.stdout)
    assert doc["models"] == {"NVIDIA H100 80GB HBM3": 32} and doc["verdict"] == "warn"


def test_a_gpu_slower_than_its_own_earlier_runs_is_named(tmp_path):
    store = tmp_path / "results.sqlite"
    _fleet(store, dropped=(1, 3))
    found = {(f.id, f.evidence["gpu"]) for f in fleet_report(history(str(store))) if f.severity == "warn"}
    assert ("fleet.gpu-dropped", "GPU-0103-aaaa") in found


def test_no_gpu_is_named_where_all_are_alike(tmp_path):
    store = tmp_path / "results.sqlite"
    _fleet(store)
    assert not [f for f in fleet_report(history(str(store))) if f.severity in ("warn", "fail")]
    assert run_cli("fleet", "report", str(store)).returncode == 0


def test_a_run_is_judged_against_the_fleet_and_kept(tmp_path):
    store = tmp_path / "results.sqlite"
    _fleet(store)
    compute = [100.2] * 8
    compute[6] = 119.0
    now = _report("gpu-node-09", dt.datetime.now(dt.timezone.utc), compute, [f"GPU-09{i:02d}-bbbb" for i in range(8)])
    found = against_fleet(rows_of(now), history(str(store), since_days=90))
    assert [(f.severity, f.evidence["gpu"]) for f in found if f.severity == "warn"] == [("warn", "GPU-0906-bbbb")]
    alone = against_fleet(rows_of(copy.deepcopy(now)), {})
    assert {f.severity for f in alone} == {"info"}                 # no fleet to compare with: said, never a pass


def test_a_store_of_another_schema_or_no_store_is_one_line(tmp_path):
    import sqlite3
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('schema', '7')")
    done = run_cli("fleet", "report", str(other))
    assert done.returncode == 2 and "schema '7'" in done.stderr
    missing = run_cli("fleet", "report", str(tmp_path / "none.sqlite"))
    assert missing.returncode == 2 and "no results store" in missing.stderr
