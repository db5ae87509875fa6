#!/usr/bin/env python3
"""`gpuprep check --json` on this host with torch installed against the same host without it, side by side in one
run (issue: with torch, check and the Slurm/NPD hooks took ~10x longer, importing torch in a child to learn its
build). Both runs use one directory of links to this environment's packages, with or without torch; a third run
adds a CUDA build of torch laid out as torch-2.14.1+cu130 is (a 34 MB libtorch_python.so whose arch flags sit at
its end: the worst case of the scan that replaced the import). Goal: with torch within 1.5x of without."""
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
RUNS = 5


def farm(target: Path, with_torch: bool) -> Path:
    site = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in site.iterdir():
        if not with_torch and entry.name.lower().startswith(("torch", "nvidia_cudnn")):
            continue
        if entry.suffix == ".pth" or entry.name.startswith("__editable__") or entry.name.startswith("gpuprep"):
            continue
        (target / entry.name).symlink_to(entry)
    return target


def timed(pythonpath: str) -> float:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-S", "-m", "gpuprep", "check", "--json"], capture_output=True,
                              text=True, env=env, check=False)
        samples.append(time.perf_counter() - start)
        if done.returncode not in (0, 1) or not done.stdout.startswith("{"):
            raise SystemExit(f"check did not run: {done.stderr.strip()[-300:]}")
    return statistics.median(samples)


def main():
    from test_torch_probe import fake_torch
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        without = farm(tmp / "without", False)
        with_torch = farm(tmp / "with", True)
        cuda = farm(tmp / "cuda", False)
        fake_torch(cuda, tmp / "imported")
        library = cuda / "torch" / "lib" / "libtorch_python.so"
        library.write_bytes(os.urandom(34 << 20) + library.read_bytes())
        rows = [("without torch", timed(f"{without}:{REPO}"))]
        rows.append(("with this environment's torch", timed(f"{with_torch}:{REPO}")))
        rows.append(("with torch 2.14.1+cu130 (layout)", timed(f"{cuda}:{REPO}")))
        imported = (tmp / "imported").exists()
    base = rows[0][1]
    print(f"gpuprep check --json on this host, median of {RUNS} runs each")
    for name, seconds in rows:
        print(f"{name:34} {seconds * 1000:8.1f} ms   {seconds / base:5.2f}x   (goal <= 1.5x)")
    print("torch imported by check:", "YES (defect)" if imported else "no")


if __name__ == "__main__":
    main()
