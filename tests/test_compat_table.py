"""`gpuprep compat` against NVIDIA's and PyTorch's published tables: one row per real combination,
with the expected verdict and where it comes from."""
import subprocess
import sys

import pytest

from gpuprep.rules.compat import judge_combination

CUDA_NOTES = "NVIDIA CUDA release notes Table 3 (toolkit driver) / Table 2 (minor version compatibility)"

# driver, cuda, expected verdict of compat.toolkit-driver, why
DRIVER_CUDA = [
    ("535.104.05", "12.2", "pass", "12.2 GA needs 535.54.03"),
    ("535.54.03", "12.2", "pass", "exactly 12.2 GA's driver"),
    ("530.30.02", "12.2", "warn", ">= 525: minor-version compatibility only"),
    ("520.61.05", "12.0", "fail", "12.x needs >= 525 even with minor-version compatibility"),
    ("525.60.13", "12.0", "pass", "12.0 GA's driver"),
    ("525.60.13", "12.4", "warn", "12.4 GA needs 550.54.14"),
    ("550.54.14", "12.4", "pass", "12.4 GA's driver"),
    ("545.23.06", "12.4", "warn", "12.3's driver under 12.4"),
    ("570.26", "12.8", "pass", "12.8 GA's driver"),
    ("565.57.01", "12.8", "warn", "below 570.26, above 525"),
    ("580.65.06", "13.0", "pass", "13.0 GA's driver"),
    ("575.57.08", "13.0", "fail", "13.x needs >= 580"),
    ("580.65.06", "13.2", "warn", "13.2 GA needs 595.45.04"),
    ("595.45.04", "13.2", "pass", "13.2 GA's driver"),
    ("450.80.02", "11.0", "pass", "11.0.2 GA needs 450.51.05"),
    ("450.80.02", "11.8", "warn", "11.x minor-version compatibility from 450.80.02"),
    ("440.33", "11.0", "fail", "below 450.80.02"),
    ("418.39", "10.1", "pass", "10.1's driver"),
    ("410.48", "10.1", "fail", "before CUDA 11 there is no minor-version compatibility"),
    ("440.33", "10.2", "pass", "10.2's driver"),
    ("470.82.01", "11.4", "pass", "11.4.0 GA needs 470.42.01"),
    ("460.27.03", "11.4", "warn", "11.2's driver under 11.4"),
    ("515.43.04", "11.7", "pass", "11.7 GA's driver"),
    ("510.39.01", "11.8", "warn", "11.6's driver under 11.8"),
]


@pytest.mark.parametrize("driver,cuda,expected,why", DRIVER_CUDA)
def test_driver_against_cuda(driver, cuda, expected, why):
    (finding,) = judge_combination(driver, cuda=cuda)
    assert finding.severity == expected, why
    assert finding.source and "Release Notes" in finding.source


# torch wheel, driver, cc, expected torch-driver verdict, expected torch-arch verdict, source
TORCH = [
    ("2.5.1+cu124", "535.104.05", "9.0", "warn", "pass", "cu124 needs 550.54.14; sm_90 in the wheel"),
    ("2.5.1+cu124", "550.54.14", "12.0", "pass", "fail", "no sm_120 or PTX in 2.5 cu124 (builder release/2.5)"),
    ("2.5.1+cu121", "530.30.02", "8.0", "pass", "pass", "cu121 needs 530.30.02"),
    ("2.7.1+cu128", "570.26", "12.0", "pass", "pass", "sm_120 in 2.7 cu128 (measured)"),
    ("2.7.1+cu128", "570.26", "7.0", "pass", "fail", "sm_50-sm_70 removed from cu128 in 2.7"),
    ("2.8.0+cu128", "575.51.03", "7.0", "pass", "pass", "sm_70 back in 2.8 cu128"),
    ("2.11.0+cu128", "575.51.03", "7.0", "pass", "fail", "Volta dropped from cu128 in 2.11 (measured)"),
    ("2.11.0+cu126", "560.28.03", "7.0", "pass", "pass", "cu126 keeps sm_70"),
    ("2.1.2+cu121", "535.104.05", "9.0", "pass", "pass", "sm_90 in 2.1 cu121"),
    ("2.0.1+cu117", "515.43.04", "9.0", "pass", "fail", "no sm_90 in 2.0 cu117"),
    ("2.0.1+cu118", "520.61.05", "9.0", "pass", "pass", "sm_90 added for cu118"),
    ("2.5.1+cu124", "550.54.14", "8.9", "pass", "pass", "sm_86 SASS runs on 8.9"),
    ("2.9.0+cu130", "580.65.06", "12.0", "pass", "pass", "13.0 GA driver; sm_120 listed"),
    ("2.9.0+cu130", "575.51.03", "7.0", "fail", "fail", "13.x needs 580; Volta not in cu130"),
    ("2.7.1+cu128", "570.26", "6.1", "pass", "fail", "Pascal not in cu128"),
    ("2.4.1+cu124", "550.54.14", "6.1", "pass", "pass", "sm_60 SASS runs on 6.1"),
    ("2.7.1+cu118", "450.80.02", "8.6", "warn", "pass", "minor-version compatibility for 11.8"),
    ("1.12.1+cu102", "440.33", "7.0", "pass", "pass", "cu102: sm_37..sm_70"),
    ("1.12.1+cu102", "418.39", "7.5", "fail", "pass", "10.2 needs 440.33; sm_70 SASS runs on 7.5"),
]


@pytest.mark.parametrize("torch,driver,cc,driver_verdict,arch_verdict,why", TORCH)
def test_torch_wheels(torch, driver, cc, driver_verdict, arch_verdict, why):
    found = {f.id: f.severity for f in judge_combination(driver, torch=torch, cc=cc)}
    assert found["compat.torch-driver"] == driver_verdict, why
    assert found["compat.torch-arch"] == arch_verdict, why


# cudnn, cuda, driver, expected, why (NVIDIA cuDNN support matrix pages)
CUDNN = [
    ("9.5.1", "12.4", "550.54.14", "pass", "9.5.1 for CUDA 12.x lists 12.4"),
    ("9.5.1", "11.8", "520.61.05", "pass", "9.5.1 for CUDA 11.x lists 11.8"),
    ("9.5.1", "12.8", "570.26", "fail", "9.5.1 lists 12.0-12.6 only"),
    ("9.10.2", "12.8", "570.26", "pass", "9.10.2 lists 12.8"),
    ("9.10.2", "12.8", "535.104.05", "pass", "non-Blackwell row needs >= 525.60.13"),
    ("9.17.0", "13.0", "575.57.08", "fail", "9.17.0 for 13.x needs >= 580.65.06"),
    ("9.17.0", "13.0", "580.65.06", "pass", "9.17.0 for 13.x"),
    ("9.17.0", "11.8", "520.61.05", "fail", "9.17.0 has no 11.x build"),
]


@pytest.mark.parametrize("cudnn,cuda,driver,expected,why", CUDNN)
def test_cudnn(cudnn, cuda, driver, expected, why):
    found = {f.id: f.severity for f in judge_combination(driver, cuda=cuda, cudnn=cudnn)}
    assert found["compat.cudnn-cuda"] == expected, why


def test_gpu_name_resolves_compute_capability():
    found = {f.id: f.severity for f in judge_combination("570.26", torch="2.5.1+cu124",
                                                         gpu_name="NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition")}
    assert found["compat.torch-arch"] == "fail"


def test_compat_cli_uses_exit_codes():
    done = subprocess.run([sys.executable, "-m", "gpuprep", "compat", "--driver", "535.104.05", "--torch",
                           "2.5.1+cu124", "--cc", "12.0", "--json"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and '"compat.torch-arch"' in done.stdout
    bad = subprocess.run([sys.executable, "-m", "gpuprep", "compat", "--driver", "banana", "--cuda", "12.4"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_a_driver_branch_that_predates_the_gpu_fails():
    """A B200 with driver 550.54.15 and torch 2.7.0+cu128 got a warning and exit 0: R550 does not support Blackwell."""
    from gpuprep import api
    found = {f.id: f for f in api.compat("550.54.15", torch="2.7.0+cu128", gpu="NVIDIA B200")}
    assert found["compat.driver-gpu"].severity == "fail" and "570.26" in found["compat.driver-gpu"].remedy
    assert {f.id: f.severity for f in api.compat("570.86.15", torch="2.7.0+cu128", gpu="NVIDIA B200")}[
        "compat.driver-gpu"] == "pass"
    assert api.compat("570.86.15", torch="2.7.0+cu128", gpu="NVIDIA GeForce RTX 5090")      # known now
    from gpuprep import knowledge as kb
    assert kb.gpu_model("NVIDIA GB200")["product"] == "GB200" and kb.gpu_model("NVIDIA B200")["product"] == "B200"


@pytest.mark.parametrize("driver, cc, torch", [("570.86.15", "12.0", "2.6.0+cu124"), ("570.86.15", "10.0", "2.5.1+cu121"),
                                               ("575.51.03", "12.0", "2.6.0+cu124"), ("580.65.06", "9.0", "2.0.1+cu117")])
def test_the_suggested_wheel_is_one_compat_itself_accepts_on_this_driver(driver, cc, torch):
    """With --cc 12.0 on a 570 driver the fix offered was a cu130 wheel that compat fails on that driver."""
    import re
    from gpuprep import api
    (arch,) = [f for f in api.compat(driver, torch=torch, cc=cc) if f.id == "compat.torch-arch"]
    assert arch.severity in ("fail", "warn")
    wheel = re.search(r"torch (\S+\+\S+)", arch.remedy).group(1)
    verdicts = {f.id: f.severity for f in api.compat(driver, torch=wheel, cc=cc)}
    assert verdicts["compat.torch-arch"] == "pass" and verdicts["compat.torch-driver"] == "pass", (wheel, verdicts)
