"""The layers import downward only (grimp reads the package's import graph, function-level imports included):
parsers and readers know no judgement, rules know no command, the registry of every id stands above them all."""
import pytest

grimp = pytest.importorskip("grimp")

# (importer, what it must never reach, directly or through a chain)
FORBIDDEN = [
    ("gpuprep.rules", ("gpuprep.burnin", "gpuprep.plan", "gpuprep.job", "gpuprep.checks", "gpuprep.api", "gpuprep.cli")),
    ("gpuprep.importers", ("gpuprep.rules", "gpuprep.probe", "gpuprep.api", "gpuprep.cli", "gpuprep.job")),
    ("gpuprep.job", ("gpuprep.api", "gpuprep.cli", "gpuprep.checks")),
    ("gpuprep.probe", ("gpuprep.rules", "gpuprep.api", "gpuprep.cli", "gpuprep.job")),
    ("gpuprep.report", ("gpuprep.api", "gpuprep.cli")),
]


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("gpuprep", cache_dir=None)     # no cache in the tree (it reached the collection)


@pytest.mark.parametrize("importer, forbidden", FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_no_import_runs_back_up_the_layers(graph, importer, forbidden):
    found = {target: graph.find_shortest_chains(importer=importer, imported=target) for target in forbidden}
    assert not {t: sorted(c)[:2] for t, c in found.items() if c}
