"""docs/checks.md documents every finding id the rules can emit, and nothing else."""
import re

from conftest import REPO

RULES = REPO / "gpuprep" / "rules"


def ids_in_code():
    found = set()
    for path in list(RULES.glob("*.py")) + [REPO / "gpuprep" / "burnin" / "judge.py", REPO / "gpuprep" / "plan.py"]:
        found |= set(re.findall(r'Finding\(\s*"([a-z]+\.[a-z0-9-]+)"', path.read_text()))
        found |= set(re.findall(r'judge_driver_for_cuda\("([a-z]+\.[a-z0-9-]+)"', path.read_text()))
        # ids kept in a table row: ("gpu.init-failed", "fail", ...)
        found |= set(re.findall(r'\(\s*"([a-z]+\.[a-z0-9-]+)",\s*"(?:fail|warn|info|pass)"', path.read_text()))
    found |= {"gpu.xid", "gpu.sxid"}     # built as f"gpu.{kind}"
    return found


def test_every_id_is_documented():
    documented = set(re.findall(r"^\| `([a-z]+\.[a-z0-9-]+)` \|", (REPO / "docs" / "checks.md").read_text(), re.M))
    assert ids_in_code() == documented


def test_the_filter_registry_is_the_set_of_check_ids():
    from gpuprep.rules.ids import CHECK_IDS
    burnin = {i for i in ids_in_code() if i.startswith(("burnin.", "plan."))}     # their own commands' findings
    unwaivable = {"fleet.host-unchecked"}      # an unchecked host never leaves the verdict
    assert CHECK_IDS == ids_in_code() - burnin - unwaivable


def test_each_role_readme_lists_every_variable_its_argument_specs_check():
    import yaml
    roles = sorted(p for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
    assert len(roles) >= 7
    for role in roles:
        spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]
        readme = (role / "README.md").read_text()
        assert f"gpuprep.node.{role.name}" in readme
        missing = [name for name in spec["options"] if f"`{name}`" not in readme]
        assert not missing, f"{role.name}/README.md does not describe {missing}"
        assert (role / "meta" / "main.yml").is_file()
