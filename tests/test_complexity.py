"""No function in the package or the collection's plugins is longer in branches than a reader can hold: cyclomatic
complexity at most 20 (radon's grade D starts at 21). A long if/elif chain becomes a table, a long function steps."""
from pathlib import Path

from radon.complexity import cc_visit

from conftest import REPO

CEILING = 20


def _blocks():
    plugins = REPO / "collection" / "plugins"
    for path in sorted((REPO / "gpuprep").rglob("*.py")) + sorted(plugins.rglob("*.py")):
        if path.is_relative_to(plugins / "module_utils"):
            continue        # tools/build_collection.py's copies of package modules, read once as the package's
        for block in cc_visit(path.read_text()):
            yield path.relative_to(REPO), block


def test_no_function_above_the_complexity_ceiling():
    over = [f"{path}:{block.lineno} {block.fullname} ({block.complexity})"
            for path, block in _blocks() if block.complexity > CEILING]
    assert not over, "split these into steps or tables:\n" + "\n".join(over)


def test_the_ceiling_is_measured_over_every_module():
    paths = {path for path, _ in _blocks()}
    assert Path("gpuprep/ansible/reducer.py") in paths and Path("collection/plugins/modules/gpuprep_restore.py") in paths
    assert len(paths) >= 60
