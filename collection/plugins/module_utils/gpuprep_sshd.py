# Built by tools/build_collection.py from gpuprep/parsers/sshd_config.py, gpuprep's one copy: edit that file, not this one.
"""sshd's configuration as gpuprep reads and judges it, shared by `gpuprep check` (sys.ssh-* rules) and the
system_tuning role's key-only SSH module.

`sshd -T` prints the server's effective configuration, one `keyword value` line each, keywords in lower case.
Where it cannot run, sshd_config with its Include'd drop-ins is read the way sshd reads it: the first value of
a keyword wins, and what follows a `Match` line applies only to some connections.

Standard library only."""
import glob
import os

# the keywords the ssh rules judge (sshd -T prints ~90; the rest stay out of the snapshot)
KEYWORDS = ("permitrootlogin", "passwordauthentication", "kbdinteractiveauthentication",
            "challengeresponseauthentication", "pubkeyauthentication", "usepam", "authenticationmethods")
# what the key-only module also needs to know to keep the connecting user able to log in
ACCESS_KEYWORDS = KEYWORDS + ("authorizedkeysfile", "authorizedkeyscommand")
# keywords whose value is a list of words (the others: the first word, lower case)
_MULTI_WORD = ("authenticationmethods", "authorizedkeysfile", "authorizedkeyscommand")

YES = ("yes", "true")
PASSWORD_KEYWORDS = ("passwordauthentication", "kbdinteractiveauthentication", "challengeresponseauthentication")
KEY_ONLY_ROOT = ("no", "prohibit-password", "without-password", "forced-commands-only")


def parse_sshd_t(text, keywords=KEYWORDS):
    settings = {}
    for line in text.splitlines():
        key, _sep, value = line.strip().partition(" ")
        if key in keywords:
            settings.setdefault(key, value.strip())
    return settings


def parse_sshd_config(path="/etc/ssh/sshd_config", root="/", keywords=KEYWORDS, depth=0):
    """The effective values of sshd_config at `path` below `root`, following Include (relative to /etc/ssh,
    globbed in lexical order, as sshd does)."""
    settings = {}
    try:
        with open(os.path.join(root, path.lstrip("/")), errors="replace") as fh:
            text = fh.read()
    except OSError:
        return settings
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        key, values = words[0].lower(), words[1:]
        if key == "match":
            break                                  # conditional blocks: not what every login gets
        if key == "include" and depth < 8:
            for pattern in values:
                pattern = pattern if pattern.startswith("/") else "/etc/ssh/" + pattern
                for found in sorted(glob.glob(os.path.join(root, pattern.lstrip("/")))):
                    included = "/" + os.path.relpath(found, root)
                    for k, v in parse_sshd_config(included, root, keywords, depth + 1).items():
                        settings.setdefault(k, v)
        elif key in keywords and values:
            settings.setdefault(key, " ".join(values) if key in _MULTI_WORD else values[0].lower())
    return settings


def password_methods_on(settings):
    """The keywords that let a login through with a password, given sshd's effective settings: none when
    AuthenticationMethods demands a key and names no password method."""
    on = [k for k in PASSWORD_KEYWORDS if settings.get(k, "no").lower() in YES]
    methods = settings.get("authenticationmethods", "any")
    if on and "publickey" in methods and "password" not in methods and "keyboard-interactive" not in methods:
        return []
    return on


def root_key_only(settings):
    return settings.get("permitrootlogin", "").lower() in KEY_ONLY_ROOT


def authorized_key_files(value, user, home, uid=""):
    """The files sshd reads a user's keys from: AuthorizedKeysFile's words with %h, %u, %U, %% expanded, relative
    paths taken from the home directory (sshd(8) TOKENS)."""
    files = []
    for word in (value or ".ssh/authorized_keys .ssh/authorized_keys2").split():
        if word.lower() == "none":
            continue
        path = word.replace("%%", "\0").replace("%h", home).replace("%u", user).replace("%U", str(uid)).replace("\0", "%")
        files.append(path if path.startswith("/") else os.path.join(home, path))
    return files


def key_lines(text):
    """The lines of an authorized_keys file that are keys (not blank, not comments)."""
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
