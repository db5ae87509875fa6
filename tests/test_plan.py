"""`gpuprep plan` on every multi-GPU topology capture in the corpus (each expected plan written by reading the
capture: its CPU and NUMA affinity columns, its NIC rows and legend), and `gpuprep launch` binding real torchrun
ranks on this machine (each rank reports its own affinity from inside)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprep.errors import BadInput

from conftest import corpus, run_cli
from gpuprep.parsers import import_files
from gpuprep.plan import make_plan
from gpuprep.snapshot import RdmaDevice

BIN = Path(sys.executable).parent


def plan_of(*names, **kwargs):
    return make_plan(import_files([corpus(n) for n in names], allow_mixed=True), **kwargs)


def rows(plan):
    return [(r.gpu, r.numa_node, r.cpulist, r.physical_cores, r.nic, r.nic_path) for r in plan.ranks]


ASUS = ("asus-esc8000a-e12-4x-rtx6000ada.topo-m.txt", "asus-esc8000a-e12-4x-rtx6000ada.numactl-H.txt",
        "asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt")


def test_asus_two_sockets_two_gpus_each_nics_by_the_gpus_socket():
    # lscpu: 2 x 32 cores, SMT off; GPU0/1 on node 0 (0-31), GPU2/3 on node 1; NIC0/1 NODE to GPU0/1, NIC2/3 to GPU2/3
    plan = plan_of(*ASUS)
    assert rows(plan) == [(0, 0, "0-15", 16, "mlx5_0", "NODE"), (1, 0, "16-31", 16, "mlx5_1", "NODE"),
                          (2, 1, "32-47", 16, "mlx5_2", "NODE"), (3, 1, "48-63", 16, "mlx5_3", "NODE")]
    assert plan.findings == []
    assert plan.torchrun == "torchrun --nproc-per-node=4 --numa-binding=exclusive train.py"
    assert plan.ranks[1].env == {"OMP_NUM_THREADS": "16", "MKL_NUM_THREADS": "16", "GPUPREP_DATALOADER_WORKERS": "15",
                                 "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NCCL_IB_HCA": "=mlx5_0,mlx5_1,mlx5_2,mlx5_3"}
    # NCCL needs one HCA list on every rank (NVIDIA/nccl#1478); the nearest NIC stays in the plan as information
    assert {r.env["NCCL_IB_HCA"] for r in plan.ranks} == {"=mlx5_0,mlx5_1,mlx5_2,mlx5_3"}
    node = plan_of(*ASUS, mode="node")
    assert [(r.cpulist, r.physical_cores) for r in node.ranks] == [("0-31", 16)] * 2 + [("32-63", 16)] * 2
    assert [r.cpulist for r in plan_of(*ASUS, mode="socket").ranks] == ["0-31"] * 2 + ["32-63"] * 2


def test_h100_with_a_pix_nic_per_gpu_and_smt_siblings():
    # CPU Affinity 0-55,112-167 (node 0) and 56-111,168-223 (node 1): 56 cores a socket, CPU n and n+112 siblings
    plan = plan_of("h100-sxm-x8-ib-penny.topo-m.txt")
    assert rows(plan)[0] == (0, 0, "0-13,112-125", 14, "mlx5_ib0", "PIX")
    assert rows(plan)[7] == (7, 1, "98-111,210-223", 14, "mlx5_ib7", "PIX")
    assert [r.nic for r in plan.ranks] == [f"mlx5_ib{i}" for i in range(8)]
    assert plan.findings == []
    assert any("n + 112" in note for note in plan.notes)


def test_ib_ports_down_leave_socket_0_gpus_a_remote_nic():
    snap = import_files([corpus("h100-sxm-x8-ib-penny.topo-m.txt")])
    snap.rdma_devices = [RdmaDevice(name=f"mlx5_ib{i}", state="1: DOWN") for i in range(8)]
    plan = make_plan(snap)
    # the Ethernet ports (mlx5_eth0-4) are all on socket 1: NODE from GPU4-7, SYS from GPU0-3
    assert [r.nic_path for r in plan.ranks] == ["SYS"] * 4 + ["NODE"] * 4
    remote = next(f for f in plan.findings if f.id == "plan.nic-remote")
    assert [r["rank"] for r in remote.evidence["ranks"]] == [0, 1, 2, 3]


def test_h100_without_nics_and_a_host_with_gpus_on_one_socket():
    stas = plan_of("h100-x8-stas.topo-m.txt")
    assert rows(stas)[4] == (4, 1, "52-64,156-168", 13, None, None)
    assert "NCCL_IB_HCA" not in stas.ranks[0].env and stas.findings == []
    inspur = plan_of("inspur-nf5280m6-2x-a100-pcie.topo-m.txt")        # both GPUs and mlx5_0 on node 1
    assert rows(inspur) == [(0, 1, "32-47", 16, "mlx5_0", "NODE"), (1, 1, "48-63", 16, "mlx5_0", "NODE")]
    uneven = [f for f in inspur.findings if f.id == "plan.uneven-gpus"]
    assert uneven and uneven[0].evidence["gpus_per_node"] == {"node0": 0, "node1": 2}


def test_old_driver_without_numa_affinity():
    # driver 418: CPU Affinity 14-27 only (one socket of two: CPU 0 is elsewhere), mlx5_N named in the header
    plan = plan_of("th2k-4x-v100-sxm2.topo-m.txt")
    assert rows(plan) == [(0, None, "14-17", 4, "mlx5_0", "PIX"), (1, None, "18-21", 4, "mlx5_1", "PIX"),
                          (2, None, "22-24", 3, "mlx5_2", "PIX"), (3, None, "25-27", 3, "mlx5_3", "PIX")]
    assert {f.id for f in plan.findings} == {"plan.gpu-numa-unknown", "plan.few-cores"}
    assert plan.torchrun is None                      # torchrun would read the unknown node as 0
    assert all(r.memory_node is None for r in plan.ranks)


@pytest.mark.parametrize("name, cpus, cores", [
    ("puget-wrx90-2x-rtx6000ada.topo-m.txt", ["0-11", "12-23"], 12),     # one socket, 24 CPUs, NIC0/1 NODE
    ("dual-gpu-nvlink-nv2.topo-m.txt", ["0-11", "12-23"], 12),
    ("dual-gpu-pcie-phb.topo-m.txt", ["0-5", "6-11"], 6),
])
def test_single_socket_two_gpu_hosts(name, cpus, cores):
    plan = plan_of(name)
    assert [r.cpulist for r in plan.ranks] == cpus and {r.physical_cores for r in plan.ranks} == {cores}
    assert not [f for f in plan.findings if f.id != "plan.few-cores"]
    assert ("plan.few-cores" in {f.id for f in plan.findings}) == (cores < 4)


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    too_many = run_cli("plan", "--from", corpus("dual-gpu-pcie-phb.topo-m.txt"), "--nproc-per-node", "3")
    assert too_many.returncode == 2 and "has 2 GPUs" in too_many.stderr and "Traceback" not in too_many.stderr
    headless = tmp_path / "topo.txt"
    headless.write_text("GPU0     X      NV2\nGPU1    NV2      X\n")
    done = run_cli("plan", "--from", str(headless))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    bogus = tmp_path / "plan.json"
    bogus.write_text('{"schema": "gpuprep.check/1"}')
    launched = run_cli("launch", "--plan", str(bogus), "--", "true")
    assert launched.returncode == 2 and "not a gpuprep plan" in launched.stderr


def test_cli_json_is_the_plan_document():
    done = run_cli("plan", *[arg for n in ASUS for arg in ("--from", corpus(n))], "--json")
    document = json.loads(done.stdout)
    assert document["schema"] == "gpuprep.plan/1" and document["verdict"] == "pass"
    assert [r["cpulist"] for r in document["ranks"]] == ["0-15", "16-31", "32-47", "48-63"]


REPORT = ("import json, os, sys; "
          "json.dump({'rank': os.environ['LOCAL_RANK'], 'cpus': sorted(os.sched_getaffinity(0)), "
          "'workers': os.environ.get('GPUPREP_DATALOADER_WORKERS'), 'omp': os.environ.get('OMP_NUM_THREADS')}, "
          "open(os.path.join(sys.argv[1], 'rank' + os.environ['LOCAL_RANK'] + '.json'), 'w'))")


def torchrun(tmp_path, *launch_args):
    if not (BIN / "torchrun").exists():
        pytest.skip("torchrun not installed (pip install 'gpuprep[burnin]')")
    out = tmp_path / "ranks"
    out.mkdir()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([str(BIN / "torchrun"), "--nproc-per-node=2", "--master-port=29631", "--no-python",
                           str(BIN / "gpuprep"), "launch", *launch_args, "--", sys.executable, "-c", REPORT, str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in out.glob("rank*.json")}


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_launch_binds_real_torchrun_ranks_as_planned(tmp_path):
    plan_file = tmp_path / "plan.json"
    done = run_cli("plan", "--nproc-per-node", "2", "--json", "-o", str(plan_file))
    assert done.returncode == 0, done.stderr
    planned = {r["local_rank"]: r for r in json.loads(plan_file.read_text())["ranks"]}
    assert planned[0]["cpus"] != planned[1]["cpus"]          # exclusive: each rank its own cores
    seen = torchrun(tmp_path, "--plan", str(plan_file))
    for rank in (0, 1):
        assert seen[rank]["cpus"] == sorted(set(planned[rank]["cpus"]) & os.sched_getaffinity(0))
        assert seen[rank]["workers"] == planned[rank]["env"]["GPUPREP_DATALOADER_WORKERS"]
        assert seen[rank]["omp"] == planned[rank]["env"]["OMP_NUM_THREADS"]
    # planned by each rank from this host's facts (LOCAL_WORLD_SIZE ranks): the same binding
    live = tmp_path / "live"
    live.mkdir()
    assert torchrun(live) == seen


def test_launch_refuses_a_plan_whose_cpus_are_not_here(tmp_path):
    foreign = tmp_path / "penny.json"
    done = run_cli("plan", "--from", corpus("h100-sxm-x8-ib-penny.topo-m.txt"), "--json", "-o", str(foreign))
    assert done.returncode == 0
    document = json.loads(foreign.read_text())
    document["ranks"][7]["cpus"] = [100000]                  # a CPU no machine here has
    foreign.write_text(json.dumps(document))
    env = {**os.environ, "LOCAL_RANK": "7"}
    launched = subprocess.run([str(BIN / "gpuprep"), "launch", "--plan", str(foreign), "--", "true"],
                              capture_output=True, text=True, timeout=60, env=env)
    assert launched.returncode == 2 and "not available here" in launched.stderr


def test_slurm_visible_devices_bind_ranks_to_their_gpus_numa_node():
    """Under Slurm (CUDA_VISIBLE_DEVICES=4,5,6,7) local rank 0 drives GPU 4, on node 1 of the H100 board; torch's
    --numa-binding splits node 1's cores among the four visible GPUs."""
    snap = import_files([corpus("h100-sxm-x8-ib-penny.topo-m.txt")])
    from gpuprep.plan import visible_gpus
    plan = make_plan(snap, visible=visible_gpus("4,5,6,7", snap))
    assert [(r.local_rank, r.gpu, r.numa_node) for r in plan.ranks] == [(0, 4, 1), (1, 5, 1), (2, 6, 1), (3, 7, 1)]
    assert plan.ranks[0].cpulist == "56-69,168-181" and plan.ranks[3].cpulist == "98-111,210-223"
    assert plan.torchrun == "torchrun --nproc-per-node=4 --numa-binding=exclusive train.py"
    assert {r.env["NCCL_IB_HCA"] for r in plan.ranks} == {"=mlx5_ib4,mlx5_ib5,mlx5_ib6,mlx5_ib7"}


def test_visible_devices_in_another_order_and_by_uuid():
    snap = import_files([corpus("h100-sxm-x8.nvidia-smi-q.txt"), corpus("h100-x8-stas.topo-m.txt")], allow_mixed=True)
    from gpuprep.plan import visible_gpus
    uuid7 = snap.gpus[7].uuid
    assert visible_gpus(f"{uuid7},2", snap) == [7, 2] and visible_gpus(uuid7[len("GPU-"):], snap) == [7]
    plan = make_plan(snap, visible=[7, 2])
    assert [(r.local_rank, r.gpu) for r in plan.ranks] == [(0, 7), (1, 2)]
    assert plan.torchrun is not None or plan.findings  # torchrun would bind rank i to the i-th visible GPU
    from gpuprep.errors import BadInput
    with pytest.raises(BadInput, match="neither a GPU index nor a UUID"):
        visible_gpus("GPU-nope", snap)
    with pytest.raises(BadInput, match="no GPU 9"):
        make_plan(snap, visible=[9])


def test_a_cpu_limited_container_divides_only_the_cpus_it_may_use():
    """A cpuset of 8 CPUs on node 0 (0-7): every rank on node 0 gets a part of them; ranks whose node has none of
    them fall back to every allowed CPU, never to an empty set."""
    plan = plan_of(*ASUS, allowed=set(range(8)))
    assert [r.cpulist for r in plan.ranks] == ["0-3", "4-7", "0-7", "0-7"]
    assert all(r.env["OMP_NUM_THREADS"] != "0" for r in plan.ranks)
    assert any("only the CPUs this process may use: 0-7" in n for n in plan.notes)
    from gpuprep.errors import BadInput
    with pytest.raises(BadInput, match="local rank 1 would get none"):
        plan_of(*ASUS, allowed={0}, nproc=2)     # GPUs 0 and 1 share node 0, of which one CPU is ours


def test_cpu_ranks_beyond_the_cpus_are_bad_input():
    done = run_cli("plan", "--from", corpus("asus-esc8000a-e12-4x-rtx6000ada.lscpu.txt"), "--nproc-per-node", "200")
    assert done.returncode == 2 and "would get none" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("spec, sees", [("0,0", []), ("0,,1", [0]), ("1,9,0", [1]), ("3,1", [3, 1]), (" 2 , 0", [2, 0])])
def test_cuda_visible_devices_is_read_as_cuda_reads_it(spec, sees):
    """'0,0' hides every GPU from CUDA yet got a plan; '0,,1' got a rank on GPU 1 where CUDA sees GPU 0 only."""
    from gpuprep.parsers.values import cuda_visible
    from gpuprep.plan import visible_gpus
    from gpuprep.snapshot import Gpu, Snapshot
    assert cuda_visible(spec, [0, 1, 2, 3]) == sees
    snap = Snapshot(gpus=[Gpu(index=i, uuid=f"GPU-{i}aaa") for i in range(4)])
    if len(sees) == len(spec.split(",")):
        assert visible_gpus(spec, snap) == sees
    else:
        with pytest.raises(BadInput, match="CUDA_VISIBLE_DEVICES"):
            visible_gpus(spec, snap)
    snap.env = {"CUDA_VISIBLE_DEVICES": spec}
    from gpuprep.rules import evaluate
    (finding,) = [f for f in evaluate(snap) if f.id == "env.cuda-visible-devices"]
    assert (finding.severity == "fail") == (len(sees) < len(spec.split(",")))


def test_launch_says_when_it_guesses(tmp_path):
    """Without LOCAL_RANK it ran as rank 0 in silence; a plan made on another host applied without a word."""
    import json
    import subprocess
    import sys
    from conftest import REPO
    snap = import_files([corpus("h100-sxm-x8-ib-penny.topo-m.txt")])
    plan = make_plan(snap, nproc=1)
    from gpuprep.report import plan_document
    doc = plan_document(plan)
    doc["host"] = "another-host"
    saved = tmp_path / "plan.json"
    saved.write_text(json.dumps(doc))
    env = {k: v for k, v in __import__("os").environ.items() if k != "LOCAL_RANK"}
    done = subprocess.run([sys.executable, "-m", "gpuprep", "launch", "--plan", str(saved), "--", "true"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert "LOCAL_RANK is not set" in done.stderr and "made on another-host" in done.stderr, done.stderr
