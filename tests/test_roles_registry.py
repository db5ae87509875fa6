"""One source for the roles: apply.yml's list (runner.role_names) is every role directory, revert.yml runs each
role's own revert steps without naming any, and each role's argument_specs match its defaults."""
import yaml

from conftest import REPO

ROLES = REPO / "collection" / "roles"


def test_apply_yml_is_the_one_role_list_and_every_role_is_in_it():
    from gpuprep.ansible.runner import role_names
    names = role_names()
    assert sorted(names) == sorted(p.name for p in ROLES.iterdir() if (p / "tasks" / "main.yml").is_file())
    assert names[0] == "driver_pin" and len(set(names)) == len(names)


def test_revert_yml_names_no_role_and_each_role_owns_its_revert_steps():
    from gpuprep.ansible.runner import role_names
    revert = (REPO / "collection" / "playbooks" / "revert.yml").read_text()
    assert not [name for name in role_names() if name in revert]
    for name in role_names():
        tasks = yaml.safe_load((ROLES / name / "tasks" / "revert.yml").read_text())
        restores = [t for t in tasks if "gpuprep.node.gpuprep_restore" in t]
        assert len(restores) == 1 and restores[0]["gpuprep.node.gpuprep_restore"]["role"] == name


def _rendered(value):
    """A default that is a template of gpuprep_state_dir is documented as what it renders to by default; one that
    depends on the host's facts has no default in the spec (its description says what it is)."""
    if isinstance(value, str) and "gpuprep_state_dir" in value:
        return "/var/lib/gpuprep"
    if isinstance(value, str) and "{{" in value:
        return None
    return value


def test_argument_specs_document_every_default_with_its_value():
    for role in sorted(p for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").is_file()):
        spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
        assert set(defaults) <= set(spec), f"{role.name}: defaults without a spec: {set(defaults) - set(spec)}"
        for name, value in defaults.items():
            assert "default" in spec[name] or _rendered(value) is None, f"{role.name}.{name}: spec has no default"
            assert spec[name].get("default") == _rendered(value), \
                f"{role.name}.{name}: argument_specs say {spec[name].get('default')!r}, defaults/main.yml {value!r}"
        for name, option in spec.items():
            assert name.startswith(role.name + "_"), f"{role.name}: {name} is not prefixed with the role's name"
            if "default" in option:
                assert name in defaults, f"{role.name}.{name}: a spec default that defaults/main.yml does not set"
