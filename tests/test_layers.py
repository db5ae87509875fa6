"""The layers import downward only (grimp reads the package's import graph, function-level imports included):
parsers and readers know no judgement, rules know no command, the registry of every id stands above them all."""
import pytest

grimp = pytest.importorskip("grimp")

# (importer, what it must never reach, directly or through a chain)
FORBIDDEN = [
    ("gpuprep.rules", ("gpuprep.burnin", "gpuprep.plan", "gpuprep.job", "gpuprep.checks", "gpuprep.api", "gpuprep.cli")),
    ("gpuprep.parsers", ("gpuprep.rules", "gpuprep.probe", "gpuprep.api", "gpuprep.cli", "gpuprep.job")),
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


def test_no_two_parts_of_the_package_import_each_other(graph):
    """No cycle, through any chain, between the package's modules and subpackages taken whole."""
    parts = sorted(graph.find_children("gpuprep"))
    reaches = {(a, b) for a in parts for b in parts
               if a != b and graph.chain_exists(importer=a, imported=b, as_packages=True)}
    assert len(parts) > 20 and not sorted((a, b) for a, b in reaches if (b, a) in reaches and a < b)


def test_code_shared_with_the_collection_imports_nothing_of_gpuprep(graph):
    """tools/build_collection.py copies these files alone into the collection's module_utils."""
    from conftest import collection_builder
    shared = [source[:-3].replace("/", ".") for source in collection_builder().SHARED_MODULES.values()]
    assert "gpuprep.parsers.nvsmi" in shared
    for module in shared:
        assert not {m for m in graph.find_modules_directly_imported_by(module) if m.startswith("gpuprep")}, module
