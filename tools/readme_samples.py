"""The README's sample outputs, produced by the tool itself from the repository's own examples: every block

    <!-- sample: ARGS [| findings] -->
    ```
    $ gpuprep ARGS
    ...
    ```
    <!-- /sample -->

is rewritten with what `gpuprep ARGS` prints now (run from the repository's root, no colour, no wrapping; `|
findings` keeps the findings and the headline, after a `...` line). `--check` rewrites nothing and exits 1 naming
the samples that drifted from what the tool prints (tests/test_docs.py runs it)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- sample: (?P<args>[^|>]+?)(?: \| (?P<filter>findings))? -->\n)```\n.*?```\n(<!-- /sample -->)",
                   re.S)


def output(args: str, keep: str = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    done = subprocess.run([sys.executable, "-m", "gpuprep", *shlex.split(args)], capture_output=True, text=True,
                          cwd=REPO, env=dict(env, NO_COLOR="1"), timeout=300)
    text = done.stdout.rstrip("\n")
    if keep == "findings":
        lines = text.splitlines()
        first = next((i for i, line in enumerate(lines) if line.startswith("[")), 0)
        text = "\n".join(["...", *lines[first:]])
    return f"$ gpuprep {args}\n{text}\n"


def render(readme: str) -> str:
    return BLOCK.sub(lambda m: f"{m.group(1)}```\n{output(m.group('args'), m.group('filter'))}```\n{m.group(4)}", readme)


def main(argv) -> int:
    path = REPO / "README.md"
    before = path.read_text()
    after = render(before)
    if "--check" in argv:
        drifted = [m.group("args") for m, n in zip(BLOCK.finditer(before), BLOCK.finditer(after))
                   if m.group(0) != n.group(0)]
        if drifted:
            print("README samples differ from what gpuprep prints: " + "; ".join(drifted)
                  + " (run python tools/readme_samples.py)", file=sys.stderr)
            return 1
        return 0
    if after != before:
        path.write_text(after)
    print(f"README.md: {len(BLOCK.findall(after))} sample(s)" + (" rewritten" if after != before else " current"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
