"""sys.ssh-password-auth and sys.ssh-root-login on real `sshd -T` output (Debian 12's OpenSSH, default and with a
site drop-in; tests/data/sshd/PROVENANCE.md), and the sshd_config reading used where `sshd -T` cannot run."""
import shutil

from conftest import REPO, run_cli
from gpuprep.parsers import import_files
from gpuprep.parsers.sshd import parse_sshd_config
from gpuprep.rules import judge_all
from gpuprep.snapshot import Snapshot

DATA = REPO / "tests" / "data" / "sshd"


def ssh_findings(snap):
    return {f.id: f for f in judge_all(snap) if f.id.startswith("sys.ssh-")}


def test_debian_default_takes_passwords_but_root_only_by_key():
    found = ssh_findings(import_files([str(DATA / "debian12-default.sshd-T.txt")]))
    assert found["sys.ssh-password-auth"].severity == "warn"
    assert found["sys.ssh-password-auth"].evidence == {"passwordauthentication": "yes"}
    assert found["sys.ssh-root-login"].severity == "pass"           # permitrootlogin without-password


def test_key_only_logins_with_root_password_allowed():
    found = ssh_findings(import_files([str(DATA / "debian12-key-only-root-password.sshd-T.txt")]))
    assert found["sys.ssh-password-auth"].severity == "pass"
    assert found["sys.ssh-root-login"].severity == "warn"
    assert found["sys.ssh-root-login"].evidence == {"permitrootlogin": "yes"}


def test_no_sshd_facts_no_ssh_findings():
    assert ssh_findings(Snapshot()) == {}


def test_sshd_config_with_its_drop_ins_reads_as_sshd_t_does(tmp_path):
    etc = tmp_path / "etc" / "ssh"
    (etc / "sshd_config.d").mkdir(parents=True)
    shutil.copy(DATA / "debian12.sshd_config", etc / "sshd_config")
    # the first value wins: 40- is read before 50-, and both after nothing in sshd_config itself sets these
    (etc / "sshd_config.d" / "50-site.conf").write_text("PasswordAuthentication no\nPermitRootLogin yes\n")
    (etc / "sshd_config.d" / "40-early.conf").write_text("# comment\nPermitRootLogin prohibit-password\n"
                                                        "Match User build\n  PasswordAuthentication yes\n")
    settings = parse_sshd_config(root=str(tmp_path))
    assert settings == {"passwordauthentication": "no", "permitrootlogin": "prohibit-password",
                        "kbdinteractiveauthentication": "no", "usepam": "yes"}
    # the same keywords as sshd -T gave for Debian's file with only the 50- drop-in
    (etc / "sshd_config.d" / "40-early.conf").unlink()
    from gpuprep.parsers.sshd import parse_sshd_t
    real = parse_sshd_t((DATA / "debian12-key-only-root-password.sshd-T.txt").read_text())
    assert {k: real[k] for k in parse_sshd_config(root=str(tmp_path))} == parse_sshd_config(root=str(tmp_path))


def test_cli_reports_them_from_a_capture():
    done = run_cli("check", "--from", str(DATA / "debian12-default.sshd-T.txt"), "--json")
    ids = {f["id"]: f["severity"] for f in __import__("json").loads(done.stdout)["findings"]}
    assert ids.get("sys.ssh-password-auth") == "warn"


def test_authorized_key_files_expand_sshd_tokens_and_skip_comments():
    from gpuprep.parsers.sshd_config import authorized_key_files, key_lines
    # Debian's default (sshd -T prints it so) and a site layout with tokens and an absolute path
    assert authorized_key_files(".ssh/authorized_keys .ssh/authorized_keys2", "deploy", "/home/deploy") == \
        ["/home/deploy/.ssh/authorized_keys", "/home/deploy/.ssh/authorized_keys2"]
    assert authorized_key_files("/etc/ssh/keys/%u %h/.ssh/k_%U none", "ops", "/srv/ops", 1001) == \
        ["/etc/ssh/keys/ops", "/srv/ops/.ssh/k_1001"]
    assert key_lines("# no keys yet\n\n   \n") == []
    assert key_lines("# a\nssh-ed25519 AAAAC3Nz deploy@ws\n") == ["ssh-ed25519 AAAAC3Nz deploy@ws"]
