# Built by tools/build_collection.py from gpuprep/common/ncclenv.py, gpuprep's one copy: edit that file, not this one.
"""The NCCL/OpenMP environment gpuprep writes to /etc/gpuprep/env: the host facts it depends on (read
below a root), the variables computed from them, their validation, and the file, quoted so that it is
read the same by systemd (EnvironmentFile=) and by a POSIX shell (`. /etc/gpuprep/env`).

Standard library only: `gpuprep nccl-env` and the nccl_env role's module both use this file."""
import os
import re

# NCCL matches interface names as prefixes unless the list starts with '='; '^' excludes.
_IFNAME_LIST = re.compile(r"^\^?=?[A-Za-z0-9_.:@-]+(,[A-Za-z0-9_.:@-]+)*$")
_HCA_LIST = re.compile(r"^\^?=?[A-Za-z0-9_.-]+(:\d+)?(,[A-Za-z0-9_.-]+(:\d+)?)*$")
_POSITIVE_INT = re.compile(r"^[1-9][0-9]{0,5}$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# what each variable NCCL/OpenMP reads accepts; other names only need printable single-line values
VALUE_RULES = {
    "NCCL_SOCKET_IFNAME": (_IFNAME_LIST, "interface names, optionally '=' or '^' first, comma-separated"),
    "NCCL_IB_HCA": (_HCA_LIST, "HCA names with an optional :port, optionally '=' or '^' first, comma-separated"),
    "NCCL_IB_DISABLE": (re.compile(r"^[01]$"), "0 or 1"),
    "OMP_NUM_THREADS": (_POSITIVE_INT, "a positive whole number"),
    "MKL_NUM_THREADS": (_POSITIVE_INT, "a positive whole number"),
}
HEADER = "# Managed by gpuprep (nccl_env). Do not edit: set overrides in the inventory.\n" \
         "# Quoted for both systemd EnvironmentFile= and POSIX sh.\n"


def _read(root, rel):
    try:
        with open(os.path.join(root, rel.lstrip("/")), encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _listdir(root, rel):
    try:
        return sorted(os.listdir(os.path.join(root, rel.lstrip("/"))))
    except OSError:
        return []


def physical_cores(root="/"):
    """Physical cores (not SMT threads): distinct (package, core) pairs from sysfs topology, else from
    /proc/cpuinfo's 'physical id'/'core id'; None when neither says."""
    pairs = set()
    for cpu in _listdir(root, "/sys/devices/system/cpu"):
        if not re.fullmatch(r"cpu\d+", cpu):
            continue
        package = _read(root, "/sys/devices/system/cpu/%s/topology/physical_package_id" % cpu)
        core = _read(root, "/sys/devices/system/cpu/%s/topology/core_id" % cpu)
        if package is not None and core is not None:
            pairs.add((package.strip(), core.strip()))
    return len(pairs) or physical_cores_from_cpuinfo(_read(root, "/proc/cpuinfo") or "")


def physical_cores_from_cpuinfo(cpuinfo):
    pairs, package, core = set(), None, None
    for line in cpuinfo.splitlines() + [""]:
        if not line.strip():
            if core is not None:
                pairs.add((package, core))
            package = core = None
        elif line.startswith("physical id"):
            package = line.split(":", 1)[1].strip()
        elif line.startswith("core id"):
            core = line.split(":", 1)[1].strip()
    return len(pairs) or None


def rdma_ports(root="/"):
    """Each RDMA device with its first port's state and link layer, from /sys/class/infiniband."""
    devices = []
    for name in _listdir(root, "/sys/class/infiniband"):
        ports = _listdir(root, "/sys/class/infiniband/%s/ports" % name)[:1]
        base = "/sys/class/infiniband/%s/ports/%s" % (name, ports[0]) if ports else None
        devices.append({"name": name,
                        "state": (_read(root, base + "/state") or "").strip() or None if base else None,
                        "link_layer": (_read(root, base + "/link_layer") or "").strip() or None if base else None})
    return devices


def default_route_interface(root="/"):
    """Interface of the IPv4 default route, from /proc/net/route."""
    for line in (_read(root, "/proc/net/route") or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000":
            return fields[0]
    return None


def host_facts(root="/"):
    """What compute_env needs from the host, besides the GPU count (the GPU facts give it)."""
    return {"default_interface": default_route_interface(root), "physical_cores": physical_cores(root),
            "rdma_devices": rdma_ports(root)}


def compute_env(facts, gpu_count, socket_ifname=None, overrides=None):
    """The variables, from host facts and the GPU count. `socket_ifname` replaces the default route's
    interface; `overrides` (a dict) is applied last. Raises ValueError naming a bad value."""
    env = {}
    ifname = socket_ifname or facts.get("default_interface")
    if ifname:
        # '=' makes NCCL match the name exactly instead of as a prefix (eth1 would match eth10)
        env["NCCL_SOCKET_IFNAME"] = ifname if ifname[0] in "=^" else "=" + ifname
    # None is unknown (a capture without NIC or CPU facts): the variable is left to NCCL and torch, never guessed
    ports = facts.get("rdma_devices")
    active = sorted(d["name"] for d in ports or [] if "ACTIVE" in (d.get("state") or "").upper())
    if active:
        env["NCCL_IB_DISABLE"] = "0"
        env["NCCL_IB_HCA"] = "=" + ",".join(active)
    elif ports is not None:
        env["NCCL_IB_DISABLE"] = "1"
    threads = facts.get("threads_per_rank")
    if threads is None and facts.get("physical_cores") and gpu_count is not None:
        threads = max(1, int(facts["physical_cores"]) // max(1, int(gpu_count)))
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    for key, value in (overrides or {}).items():
        env[str(key)] = "" if value is None else str(value)
    problems = validate(env)
    if problems:
        raise ValueError("; ".join(problems))
    return env


def validate(env):
    """Why each variable cannot be written (empty when all can)."""
    problems = []
    for key in sorted(env):
        value = env[key]
        # fullmatch: re.match with '$' also accepts a name or value that ends in a newline
        if not isinstance(key, str) or not _NAME.fullmatch(key):
            problems.append("%r is not a valid environment variable name" % (key,))
        elif not isinstance(value, str):
            problems.append("%s: the value must be text, not %r" % (key, value))
        elif any(ord(ch) < 32 or 127 <= ord(ch) < 160 or ch in "\u2028\u2029" for ch in value):
            problems.append("%s: a control character (newline, tab, ...) in %r" % (key, value))
        elif key in VALUE_RULES and not VALUE_RULES[key][0].fullmatch(value):
            problems.append("%s=%r: expected %s" % (key, value, VALUE_RULES[key][1]))
    return problems


def quote(value):
    """Double quotes with \\ " $ ` escaped: systemd's EnvironmentFile and POSIX sh read the same value."""
    return '"' + re.sub(r'([\\"$`])', r"\\\1", value) + '"'


def render_env_file(env):
    return HEADER + "".join("%s=%s\n" % (key, quote(env[key])) for key in sorted(env))


_LINE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)=(?:"((?:[^"\\]|\\.)*)"|([^"\'\\\s]*))\s*')


def parse_env_file(text):
    """The variables of a file render_env_file wrote, as systemd's EnvironmentFile reads them: the quotes are
    syntax, not part of the value (NCCL_SOCKET_IFNAME="=eth0" is =eth0). Comments and blank lines are skipped;
    a line in no form this writer uses is skipped too and named in the second item (never passed on half-read)."""
    env, skipped = {}, []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.fullmatch(line.strip())
        if not match:
            skipped.append(number)
            continue
        quoted, bare = match.group(2), match.group(3)
        env[match.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
    return env, skipped


def render_profile_script(env_file):
    """The /etc/profile.d script that exports the file to login shells."""
    return "# Managed by gpuprep (nccl_env)\nset -a; . %s; set +a\n" % shell_word(env_file)


def shell_word(text):
    return "'" + text.replace("'", "'\\''") + "'"
