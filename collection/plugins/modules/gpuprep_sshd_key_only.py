#!/usr/bin/python
# Copyright: gpuprep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Ansible module: key-only SSH logins through one sshd_config drop-in, validated by sshd before it stays, and
never at the price of locking out the user Ansible logs in as."""

DOCUMENTATION = r"""
module: gpuprep_sshd_key_only
short_description: Key-only SSH logins through a drop-in in sshd_config.d, without locking anyone out
version_added: 0.1.0
description:
  - Writes a drop-in that turns off password and keyboard-interactive logins and lets root in by key only.
  - Before changing anything it refuses when O(login_user) has no authorized key (or logs in with a password),
    since the next connection would be locked out.
  - After writing, C(sshd -t) must accept the whole configuration and C(sshd -T) must show the drop-in's values
    in effect (sshd keeps the first value it reads, so a file read earlier can win); otherwise the previous
    state is put back and the module fails, naming why.
  - Does not reload sshd; the role's handler does (C(systemctl try-reload-or-restart)).
author: gpuprep contributors (@gpuprep)
attributes:
  check_mode:
    support: full
    description: Reports the change and its diff, writes nothing.
  diff_mode:
    support: full
    description: The drop-in before and after.
options:
  path:
    description: The drop-in. sshd reads C(sshd_config.d) in lexical order and keeps the first value, so it sorts early.
    type: path
    default: /etc/ssh/sshd_config.d/01-gpuprep-key-only.conf
  permit_root_login:
    description: PermitRootLogin in the drop-in.
    type: str
    choices: [prohibit-password, 'no']
    default: prohibit-password
  login_user:
    description: The user Ansible (or the admin) logs in as; they must have an authorized key.
    type: str
    required: true
  login_uses_password:
    description: Whether that login is by password (then key-only would lock it out, and the module refuses).
    type: bool
    default: false
  sshd:
    description: The sshd binary.
    type: path
    default: /usr/sbin/sshd
"""

EXAMPLES = r"""
- name: Key-only SSH
  gpuprep.node.gpuprep_sshd_key_only:
    login_user: "{{ ansible_user }}"
  notify: Reload sshd
"""

RETURN = r"""
effective:
  description: The access keywords as C(sshd -T) reports them after the change (or as they are, when none was needed).
  type: dict
  returned: when sshd is installed
key_files:
  description: The files the login user's keys were found in.
  type: list
  elements: str
  returned: when a change was needed
"""

import os
import pwd
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_revert_record import write_atomic
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_sshd import (
    ACCESS_KEYWORDS, authorized_key_files, key_lines, parse_sshd_t, password_methods_on, root_key_only,
)

HEADER = ("# Managed by gpuprep (system_tuning_ssh): key-only logins. sshd keeps the first value it reads,\n"
          "# so this file sorts before the other drop-ins. `gpuprep revert` removes it.\n")


def render(permit_root_login):
    return HEADER + ("PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                     "PermitRootLogin %s\nPubkeyAuthentication yes\n" % permit_root_login)


def run_sshd(sshd, *args):
    done = subprocess.run([sshd, *args], capture_output=True, text=True, check=False)
    said = (done.stderr or done.stdout).strip().splitlines()
    return done.returncode, done.stdout, said[-1] if said else "exit %d" % done.returncode


def read(path):
    try:
        with open(path, errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def lockout_reason(module, sshd):
    """Why key-only logins would lock out the login user (None when they would not), and the key files found."""
    user, p = module.params["login_user"], module.params
    if p["login_uses_password"]:
        return "%s logs in with a password, which key-only SSH would refuse" % user, []
    if user == "root" and p["permit_root_login"] == "no":
        return "the login user is root and permit_root_login is 'no'", []
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return "the login user %r does not exist on this host" % user, []
    rc, out, said = run_sshd(sshd, "-T", "-C", "user=%s,host=localhost,addr=127.0.0.1" % user)
    if rc != 0:
        return "sshd -T cannot read the current configuration (%s)" % said, []
    settings = parse_sshd_t(out, ACCESS_KEYWORDS)
    if settings.get("authorizedkeyscommand", "none").lower() != "none":
        module.warn("keys for %s come from AuthorizedKeysCommand, which gpuprep cannot check" % user)
        return None, []
    files = authorized_key_files(settings.get("authorizedkeysfile"), user, entry.pw_dir, entry.pw_uid)
    with_keys = [f for f in files if key_lines(read(f) or "")]
    if not with_keys:
        return "%s has no authorized key in %s" % (user, ", ".join(files)), []
    return None, with_keys


def put_back(path, before):
    if before is None:
        if os.path.lexists(path):
            os.remove(path)
    else:
        write_atomic(path, before.encode(), 0o644)


def main():
    module = AnsibleModule(argument_spec={
        "path": {"type": "path", "default": "/etc/ssh/sshd_config.d/01-gpuprep-key-only.conf"},
        "permit_root_login": {"type": "str", "choices": ["prohibit-password", "no"], "default": "prohibit-password"},
        "login_user": {"type": "str", "required": True},
        "login_uses_password": {"type": "bool", "default": False, "no_log": False},
        "sshd": {"type": "path", "default": "/usr/sbin/sshd"},
    }, supports_check_mode=True)
    path, sshd = module.params["path"], module.params["sshd"]
    if not os.access(sshd, os.X_OK):
        module.exit_json(changed=False, msg="no sshd at %s: nothing to make key-only" % sshd)
    wanted, before = render(module.params["permit_root_login"]), read(path)
    if before == wanted:
        rc, out, said = run_sshd(sshd, "-T")
        module.exit_json(changed=False, effective=parse_sshd_t(out, ACCESS_KEYWORDS) if rc == 0 else {})
    reason, key_files = lockout_reason(module, sshd)
    if reason:
        module.fail_json(msg="refusing key-only SSH: %s; the next login would be locked out. Add a key first "
                             "(ansible.posix.authorized_key) or leave system_tuning_ssh_enabled off" % reason)
    diff = {"before": before or "", "after": wanted, "before_header": path, "after_header": path}
    if module.check_mode:
        module.exit_json(changed=True, diff=diff, key_files=key_files)
    if not os.path.isdir(os.path.dirname(path)):
        module.fail_json(msg="%s does not exist: this sshd has no drop-in directory" % os.path.dirname(path))
    write_atomic(path, wanted.encode(), 0o644)
    rc, _out, said = run_sshd(sshd, "-t")
    if rc != 0:
        put_back(path, before)
        module.fail_json(msg="sshd -t rejects the configuration with %s (%s); put back as it was" % (path, said))
    rc, out, said = run_sshd(sshd, "-T")
    effective = parse_sshd_t(out, ACCESS_KEYWORDS)
    if rc != 0 or password_methods_on(effective) or not root_key_only(effective) \
            or effective.get("pubkeyauthentication", "yes") != "yes":
        put_back(path, before)
        module.fail_json(msg="with %s in place sshd -T still shows %s: a file sshd reads earlier (sshd_config "
                             "itself, or a drop-in sorting before it) sets these first, or sshd_config does not "
                             "Include sshd_config.d; put back as it was"
                             % (path, {k: effective.get(k) for k in password_methods_on(effective)
                                       + ["permitrootlogin", "pubkeyauthentication"]} if rc == 0 else said))
    module.exit_json(changed=True, diff=diff, effective=effective, key_files=key_files)


if __name__ == "__main__":
    main()
