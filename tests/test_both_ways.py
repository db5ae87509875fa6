"""Issue 47's classes, each a verdict that must be right both ways: an unknown is neither pass nor fail, a fail
needs positive evidence, and a positive sign of a fault is never lost to the capture around it."""
import json

from conftest import CORPUS, run_cli
from gpuprep.rules import evaluate
from gpuprep.rules.compat import judge_combination
from gpuprep.snapshot import RdmaDevice, Snapshot


def _by_id(findings, finding_id):
    return [(f.severity, f.subject) for f in findings if f.id == finding_id]


# -- an unread table cell is unknown, never a fail --------------------------------------------------------------

def test_the_readmes_compat_example_does_not_fail_on_an_unread_cudnn_cell():
    """cuDNN 9.1.0 is what the torch 2.4-2.6 wheels ship; its CUDA 12.x column was unread (`?`) and failed."""
    done = run_cli("compat", "--driver", "535.104.05", "--cuda", "12.4", "--cudnn", "9.1.0", "--json")
    doc = json.loads(done.stdout)
    cudnn = [f for f in doc["findings"] if f["id"] == "compat.cudnn-cuda"]
    assert cudnn and cudnn[0]["severity"] in ("pass", "info"), cudnn
    assert done.returncode == 0, done.stdout


def test_a_cudnn_built_for_another_cuda_major_still_fails():
    (found,) = [f for f in judge_combination("580.65.06", cuda="13.0", cudnn="9.10.2") if f.id == "compat.cudnn-cuda"]
    assert found.severity == "fail"


# -- InfiniBand: NCCL uses only ACTIVE ports ------------------------------------------------------------------

def _dual_port(second_state, hca=None):
    ports = [RdmaDevice(name="mlx5_0", port=1, link_layer="InfiniBand", state="4: ACTIVE", phys_state="5: LinkUp",
                        rate_gbps=400.0),
             RdmaDevice(name="mlx5_0", port=2, link_layer="InfiniBand", state=second_state[0],
                        phys_state=second_state[1])]
    return Snapshot(rdma_devices=ports, env={"NCCL_IB_HCA": hca} if hca else None)


def test_the_uncabled_second_port_of_a_dual_port_hca_warns():
    findings = evaluate(_dual_port(("1: DOWN", "2: Polling")))
    assert _by_id(findings, "net.ib-port-down") == [("warn", "mlx5_0 port 2")]


def test_a_second_port_nccl_is_told_to_use_fails():
    findings = evaluate(_dual_port(("1: DOWN", "2: Polling"), hca="=mlx5_0:1,mlx5_0:2"))
    assert _by_id(findings, "net.ib-port-down") == [("fail", "mlx5_0 port 2")]


def test_an_hca_with_no_active_port_fails():
    snap = _dual_port(("1: DOWN", "2: Polling"))
    snap.rdma_devices[0].state, snap.rdma_devices[0].phys_state = "1: DOWN", "3: Disabled"
    assert {s for s, _ in _by_id(evaluate(snap), "net.ib-port-down")} == {"fail"}
