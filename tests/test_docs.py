"""docs/checks.md documents every finding id gpuprep registers, and nothing else; each rule reports only the ids it
registered, over every capture in the corpus."""
import re

import pytest

from conftest import CORPUS, REPO


def documented():
    return set(re.findall(r"^\| `([a-z]+\.[a-z0-9-]+)` \|", (REPO / "docs" / "checks.md").read_text(), re.M))


def test_every_registered_id_is_documented_and_nothing_else():
    from gpuprep.checks import all_ids
    assert all_ids() == documented()


def test_the_filters_accept_the_host_and_drift_ids_and_their_areas_only():
    from gpuprep.checks import all_ids
    from gpuprep.rules.ids import areas, check_ids
    assert check_ids() < all_ids()
    assert not any(i.startswith(("burnin.", "plan.")) for i in check_ids()) and "fleet.host-unchecked" not in check_ids()
    assert {"gpu", "drift", "compat", "topo"} <= areas()


def test_a_rule_reporting_an_id_it_did_not_register_stops_the_judge():
    from gpuprep.rules import Context, Finding, RULES, UndeclaredId, judge_all
    from gpuprep.snapshot import Snapshot

    def rogue(snap, ctx):
        return [Finding("gpu.not-registered", "fail", "host", "made up")]
    rogue.ids = frozenset({"gpu.xid"})
    RULES.append(rogue)
    try:
        with pytest.raises(UndeclaredId, match="gpu.not-registered"):
            judge_all(Snapshot(), Context())
    finally:
        RULES.remove(rogue)


def test_every_corpus_capture_is_judged_with_registered_ids_only():
    """Runs every rule over every capture of the corpus (judge_all checks each finding's id against its rule)."""
    from gpuprep.api import check
    from gpuprep.errors import BadInput
    judged = 0
    for path in sorted(p for p in CORPUS.glob("*") if p.suffix in (".txt", ".xml")):
        try:
            check([str(path)], allow_mixed=True)
        except BadInput:
            continue
        judged += 1
    assert judged >= 45


def test_each_role_readme_lists_every_variable_its_argument_specs_check():
    import yaml
    roles = sorted(p for p in (REPO / "collection" / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
    assert len(roles) >= 7
    for role in roles:
        spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]
        readme = (role / "README.md").read_text()
        assert f"gpuprep.node.{role.name}" in readme
        missing = [name for name in spec["options"] if f"`{name}`" not in readme]
        assert not missing, f"{role.name}/README.md does not describe {missing}"
        assert (role / "meta" / "main.yml").is_file()


def test_the_readmes_sample_outputs_are_what_the_tool_prints():
    """tools/readme_samples.py writes them from the repository's examples; a drift between the README and the tool
    fails here (run the script to update the README)."""
    import subprocess
    import sys
    from conftest import REPO
    done = subprocess.run([sys.executable, str(REPO / "tools" / "readme_samples.py"), "--check"], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    readme = (REPO / "README.md").read_text()
    assert readme.count("<!-- sample: ") >= 2 and (REPO / "docs" / "img" / "check-report.png").is_file()
    assert (REPO / "docs" / "img" / "diagnose-report.png").is_file() and "Three commands" not in readme
