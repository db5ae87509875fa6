"""`check` reads torch's version, CUDA build and compiled GPU architectures from its files and never imports it
(every training node has torch; importing it cost `check` and the Slurm/NPD hooks ~6 s). The stand-in is a torch
distribution laid out as the real wheel is: its version.py and the CUDA_ARCH_FLAGS string are copied from
torch-2.14.1+cu130 (PyPI, manylinux_2_28_x86_64: torch/version.py, and the string in torch/lib/libtorch_python.so),
and its __init__ leaves a mark when anything imports it."""
import json

from conftest import run_cli

VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.14.1+cu130'
debug = False
cuda: Optional[str] = '13.0'
git_version = '5c4886908584029761b579af026dcfb627c84070'
hip: Optional[str] = None
rocm: Optional[str] = None
xpu: Optional[str] = None
"""
ARCH_FLAGS = b"sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"


def fake_torch(site, marker):
    package = site / "torch"
    (package / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    (package / "version.py").write_text(VERSION_PY)
    # the flags sit between other strings of the library, as in the real file
    (package / "lib" / "libtorch_python.so").write_bytes(
        b"\x7fELF\x02\x01\x01" + b"\0" * 4096 + b"CUDA_ARCH_FLAGS\0" + ARCH_FLAGS + b"\0torch._C\0" + b"\xff" * 4096)
    info = site / "torch-2.14.1+cu130.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.14.1+cu130\n")
    (info / "RECORD").write_text("")
    cudnn = site / "nvidia_cudnn_cu13-9.13.0.50.dist-info"
    cudnn.mkdir()
    (cudnn / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cudnn-cu13\nVersion: 9.13.0.50\n")


def test_check_reads_torch_from_its_files_and_never_imports_it(tmp_path):
    marker = tmp_path / "torch-was-imported"
    fake_torch(tmp_path / "site", marker)
    done = run_cli("snapshot", env={"PYTHONPATH": str(tmp_path / "site")})
    assert done.returncode == 0, done.stderr
    torch = json.loads(done.stdout)["software"]["torch"]
    assert torch == {"version": "2.14.1+cu130", "cuda": "13.0", "cudnn": "9.13.0.50",
                     "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]}
    done = run_cli("check", "--json", env={"PYTHONPATH": str(tmp_path / "site")})
    assert done.returncode in (0, 1), done.stderr
    assert not marker.exists(), "check imported torch"
