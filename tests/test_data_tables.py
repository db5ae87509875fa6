"""The package's data tables parse as tables: every row has exactly the header's columns (an unquoted comma in a
source note shifted the GH200 row's locked-clock columns into text), and the values the code branches on are
from their closed sets."""
import csv
import io

import pytest

from conftest import REPO
from gpuprep import knowledge as kb

DATA = REPO / "gpuprep" / "data"


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.csv")))
def test_every_row_has_the_headers_columns(name):
    lines = [line for line in (DATA / name).read_text().splitlines() if line.strip() and not line.startswith("#")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    width = len(rows[0])
    bad = [(i + 2, len(row), row[0]) for i, row in enumerate(rows[1:]) if len(row) != width]
    assert not bad, f"{name}: rows whose column count differs from the header's {width}: {bad}"


def test_gpu_table_flags_are_yes_or_no_and_nvlink_forms_known():
    for row in kb.gpu_models():
        assert row["locked_clocks"] in ("yes", "no") and row["locked_memory_clocks"] in ("yes", "no"), row["product"]
        assert row["nvlink_form"] in ("", "baseboard", "bridge"), row["product"]


def test_sxm_boards_are_baseboard_nvlink_and_pcie_cards_bridges():
    assert kb.gpu_model("NVIDIA H200")["nvlink_form"] == "baseboard"          # the h200 capture's name (HGX SXM)
    assert kb.gpu_model("NVIDIA H200 NVL")["nvlink_form"] == "bridge"
    assert kb.gpu_model("NVIDIA H100 80GB HBM3")["nvlink_form"] == "baseboard"
    gh200 = kb.gpu_model("NVIDIA GH200 480GB")
    assert gh200["locked_clocks"] == "yes" and "C2C" in gh200["source"]


def test_busbw_expectations_say_their_algorithm_and_size():
    rows = kb.expected_busbw()
    assert rows and all(r["algorithm"] in ("ring", "nvls") and int(r["message_bytes"]) >= 1 << 30 for r in rows)
    by = {r["product"]: r for r in rows}
    # H100 and H200 share the NVLink4/NVSwitch fabric: judged by the same algorithm, their figures are alike
    assert by["H100 SXM5"]["algorithm"] == by["H200"]["algorithm"] == "ring"
    assert abs(float(by["H100 SXM5"]["expected_busbw_gbs"]) - float(by["H200"]["expected_busbw_gbs"])) < 20


def test_one_version_for_the_package_and_the_collection():
    import yaml
    from gpuprep import __version__
    assert yaml.safe_load((REPO / "collection" / "galaxy.yml").read_text())["version"] == __version__
    assert 'dynamic = ["version"]' in (REPO / "pyproject.toml").read_text()
    from importlib.metadata import version
    assert version("gpuprep") == __version__
    releases = yaml.safe_load((REPO / "collection" / "changelogs" / "changelog.yaml").read_text())["releases"]
    assert __version__ in releases
