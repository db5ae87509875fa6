"""The README's pictures of the HTML reports, taken in the real browser the tests use (headless Chromium): the
check report of the A100 capture in examples/, and the diagnose report of the real ResNet-50 trace in tests/traces.
Writes docs/img/check-report.png and docs/img/diagnose-report.png. Usage: python tools/screenshots.py"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
REPORTS = {
    "check-report.png": ["check", "--from", "examples/a100-sxm4-x4.nvidia-smi-q.txt"],
    "diagnose-report.png": ["diagnose", "tests/traces/kineto-resnet50/v100-num_workers_0.pt.trace.json.gz"],
}


def main() -> int:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("screenshots: no chromium on PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        for png, args in REPORTS.items():
            page = Path(tmp) / (png[:-4] + ".html")
            subprocess.run([sys.executable, "-m", "gpuprep", *args, "-o", str(page)], cwd=REPO, check=False,
                           capture_output=True, timeout=300)
            out = REPO / "docs" / "img" / png
            subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp}/profile", f"--screenshot={out}",
                            "--window-size=1280,1400", page.as_uri()], capture_output=True, timeout=120, cwd=tmp)
            print(f"{out.relative_to(REPO)}: {out.stat().st_size} bytes" if out.exists() else f"{png}: not written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
