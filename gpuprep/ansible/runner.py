"""Run gpuprep's playbooks through ansible-runner. The event handler only enqueues (and returns
True, or ansible-runner drops the event); the caller drains the queue through the pure reducer."""
from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import BadInput, GpuprepError, bad_argument
from ..resources import collection_dir, collections_path, playbooks_dir
from .artifacts import scrub
from .reducer import RunState, interrupt, reduce

ANSIBLE_TAGS = ("always", "never")


@dataclass
class Connection:
    """How hosts are reached, as ansible-playbook's -u, --private-key, --become-method, -K take it. The
    password is handed to ansible-runner's prompt answering only: never on a command line or in a file."""
    user: Optional[str] = None
    private_key: Optional[str] = None
    become_method: Optional[str] = None
    become_password: Optional[str] = None
    no_become: bool = False      # check -i/snapshot -i --no-become: the probe runs as the connecting user

    def argv(self) -> List[str]:
        out: List[str] = []
        if self.user:
            out += ["--user", self.user]
        if self.private_key:
            out += ["--private-key", self.private_key]
        if self.become_method:
            out += ["--become-method", self.become_method]
        if self.become_password is not None:
            out.append("--ask-become-pass")
        return out

    def passwords(self) -> Optional[Dict[str, str]]:
        if self.become_password is None:
            return None
        return {r"^BECOME password.*:\s*?$": self.become_password}


@dataclass
class ApplyRequest:
    playbook: str                        # apply.yml | revert.yml
    inventory: Optional[str]
    limit: Optional[str] = None
    tags: Sequence[str] = ()
    skip_tags: Sequence[str] = ()
    check: bool = False
    diff: bool = False
    forks: Optional[int] = None
    extravars: Optional[Dict[str, object]] = None     # the user's -e values: secret, redacted everywhere
    internal_vars: Optional[Dict[str, object]] = None   # gpuprep's own variables: written as they are
    local: bool = False
    mitogen: bool = True       # Mitogen's strategy when installed: one persistent interpreter per host
    connection: Optional[Connection] = None
    verbosity: int = 0         # -v..-vvvv: Ansible's own output, streamed (secrets redacted)
    timeout: Optional[int] = None   # seconds for the whole run; then it is cancelled like an interrupt


@dataclass
class ApplyOutcome:
    state: RunState
    artifacts: str
    status: str
    rc: int
    hosts_in_inventory: List[str]
    signal: Optional[int] = None         # SIGINT/SIGTERM that cancelled the run
    groups: Dict[str, List[str]] = field(default_factory=dict)     # host -> the inventory groups that list it


def _ansible_bin(name: str) -> str:
    here = os.path.join(os.path.dirname(sys.executable), name)
    found = here if os.path.exists(here) else shutil.which(name)
    if not found:
        raise BadInput(f"{name} not found: install ansible-core (a dependency of gpuprep)")
    return found


MIN_ANSIBLE_CORE = (2, 18)     # meta: end_role, which the fast re-run ends a settled role with


def parse_version(text: str) -> tuple:
    """(2, 19, 14) from '2.19.14', 'ansible-playbook [core 2.19.14]' or '2.18.0rc1'; () if none."""
    import re
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(part) for part in match.groups() if part is not None) if match else ()


def ensure_ansible_core() -> str:
    """The ansible-playbook this run will use, after checking that it is recent enough (BadInput if not)."""
    playbook = _ansible_bin("ansible-playbook")
    if os.path.dirname(playbook) == os.path.dirname(sys.executable):
        try:
            from ansible.release import __version__ as found
        except ImportError:
            found = ""
    else:
        done = subprocess.run([playbook, "--version"], capture_output=True, text=True, timeout=60)
        found = done.stdout.splitlines()[0] if done.stdout else ""
    version = parse_version(found)
    if version[:2] < MIN_ANSIBLE_CORE:
        need = ".".join(map(str, MIN_ANSIBLE_CORE))
        raise BadInput(f"{playbook} is ansible-core {'.'.join(map(str, version)) or 'of unknown version'}; "
                       f"gpuprep needs >= {need}: pip install 'ansible-core>={need}' (Python >= 3.11)")
    return playbook


def parse_extravars(values: Sequence[str]) -> Dict[str, object]:
    """-e as ansible-playbook takes it, repeatable, later wins: `k=v k2='two words'` (values read as YAML, so
    600 is a number), a JSON/YAML mapping `{"k": "v"}`, or `@file.yml` / `@file.json`."""
    out: Dict[str, object] = {}
    for value in values:
        text = value.strip()
        if text.startswith("@"):
            out.update(_vars_file(text[1:]))
        elif text.startswith("{"):
            out.update(_mapping(text, f"{value!r}"))
        else:
            out.update(_pairs(value))
    return out


MAX_VARS_BYTES = 16 << 20      # an -e @file: far above any real variables file


def _no_aliases_loader():
    """YAML's SafeLoader without aliases: `*name` references let a few lines expand to gigabytes once the values
    are written out (the 'billion laughs'); variables files do not need them."""
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", event.start_mark)
            return super().compose_node(parent, index)
    return Loader


def _mapping(text: str, origin: str) -> Dict[str, object]:
    import yaml
    try:
        data = yaml.load(text, Loader=_no_aliases_loader())      # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise bad_argument("extra_vars", f"{origin}: not valid JSON/YAML ({str(exc).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) and k.isidentifier() for k in data):
        raise bad_argument("extra_vars", f"{origin}: expected a mapping of variable names to values")
    return data


def _vars_file(path: str) -> Dict[str, object]:
    if not path:
        raise bad_argument("extra_vars", "@: expected @FILE (YAML or JSON)")
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_VARS_BYTES + 1)
    except OSError as exc:
        raise bad_argument("extra_vars", f"@{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > MAX_VARS_BYTES:
        raise bad_argument("extra_vars", f"@{path}: larger than {MAX_VARS_BYTES >> 20} MiB, not a variables file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_argument("extra_vars", f"@{path}: not UTF-8 text (byte {exc.start})") from None
    return _mapping(text, f"@{path}")


def _pairs(value: str) -> Dict[str, object]:
    import shlex

    import yaml
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise bad_argument("extra_vars", f"{value!r}: {exc}") from None
    if not all("=" in w for w in words):       # `k={a: 1, b: 2}`: one pair whose value has spaces
        words = [value.strip()]
    out: Dict[str, object] = {}
    for word in words or [value]:
        key, sep, raw = word.partition("=")
        if not sep or not key.strip().isidentifier():
            raise bad_argument("extra_vars", f"{value!r}: expected KEY=VALUE, a JSON/YAML mapping or @FILE")
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            out[key.strip()] = raw
    return out


def role_names() -> List[str]:
    """The roles apply.yml runs, in its order: the one list of roles (revert.yml reads it too, and undoes them in
    the opposite order). Each role's tag is its name."""
    import yaml
    plays = yaml.safe_load((playbooks_dir() / "apply.yml").read_text())
    return [entry["role"].rpartition(".")[2] for entry in plays[0]["roles"]]


def concern_tags() -> List[str]:
    """system_tuning's concerns, one task file each, tagged system_tuning_<file> (main and revert are not concerns)."""
    tasks = collection_dir() / "roles" / "system_tuning" / "tasks"
    return [f"system_tuning_{p.stem}" for p in sorted(tasks.glob("*.yml")) if p.stem not in ("main", "revert")]


def validate_tags(tags: Sequence[str]) -> None:
    concerns, roles = concern_tags(), role_names()
    unknown = [t for t in tags if t not in set(roles) | set(concerns) | set(ANSIBLE_TAGS)]
    if unknown:
        raise BadInput(f"unknown tag(s) {', '.join(unknown)} (roles: {', '.join(roles)}; "
                       f"system_tuning's concerns: {', '.join(concerns)})")


INVENTORY_MEMORY = 1 << 30    # address space for ansible-inventory: far above a real inventory of thousands of hosts


def _bounded_memory() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (INVENTORY_MEMORY, INVENTORY_MEMORY))


def inventory_hosts(inventory: str, limit: Optional[str]) -> List[str]:
    """The hosts an inventory (INI, YAML, directory, script, comma list) yields, through ansible itself."""
    return read_inventory(inventory, limit)[0]


def read_inventory(inventory: str, limit: Optional[str]) -> Tuple[List[str], Dict[str, List[str]]]:
    """(the hosts an inventory yields, each host's groups: those that list it by name, not `all` or `ungrouped`),
    through ansible itself."""
    if "," not in inventory and not os.path.exists(inventory):
        raise BadInput(f"inventory {inventory}: no such file or directory")
    argv = [_ansible_bin("ansible-inventory"), "-i", inventory, "--list"]
    if limit:
        argv += ["--limit", limit]
    env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED="True", ANSIBLE_NOCOLOR="1")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, preexec_fn=_bounded_memory)
    except subprocess.TimeoutExpired:
        raise BadInput(f"inventory {inventory}: ansible-inventory did not finish in 120 s") from None
    if done.returncode != 0:
        raise BadInput(f"inventory {inventory}: {_inventory_failure(done)}")
    data = json.loads(done.stdout)
    hosts = set(data.get("_meta", {}).get("hostvars", {}))
    groups: Dict[str, List[str]] = {}
    for name, group in data.items():
        if isinstance(group, dict):
            hosts.update(group.get("hosts") or [])
            for host in group.get("hosts") or []:
                if name not in ("all", "ungrouped"):
                    groups.setdefault(host, []).append(name)
    if not hosts:
        raise BadInput(f"inventory {inventory}: no hosts" + (f" match --limit {limit}" if limit else ""))
    return sorted(hosts), {host: sorted(names) for host, names in groups.items()}


def _inventory_failure(done: subprocess.CompletedProcess) -> str:
    """Why ansible-inventory failed, in one line: Ansible prints each inventory plugin's failure; the 'auto'
    plugin's is only the first, so another plugin's is the cause."""
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    if done.returncode < 0 or any("MemoryError" in line for line in lines):
        return f"reading it needed more than {INVENTORY_MEMORY >> 30} GiB (a YAML alias bomb?)"
    causes = [line for line in lines if "ERROR" in line or "Unable to parse" in line or "Failed" in line]
    fallback = causes[0] if causes else (lines[0] if lines else "ansible-inventory failed")
    reason = next((line for line in causes if "auto" not in line), fallback)
    where = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Origin:")), None)
    reason = reason.replace("[WARNING]: ", "") + (f" (at {where})" if where else "")
    return reason.replace("[ERROR]: ", "").replace("ERROR! ", "")


def mitogen_env() -> Dict[str, str]:
    """Settings for Mitogen's strategy (several times fewer round trips per task) when it is installed.
    Connections it does not know (e.g. an FQCN plugin) fall back to Ansible's own, so it is safe to enable."""
    try:
        import ansible_mitogen
    except ImportError:
        return {}
    plugins = os.path.join(os.path.dirname(ansible_mitogen.__file__), "plugins", "strategy")
    return {"ANSIBLE_STRATEGY_PLUGINS": plugins, "ANSIBLE_STRATEGY": "mitogen_linear"}


_SOCKET_PATH_MAX = 107                          # AF_UNIX: sun_path is 108 bytes with its NUL
_MITOGEN_SOCKET = "mitogen_unix_xxxxxxxx.sock"   # the name Mitogen gives its socket, in TMPDIR


def _mitogen_for_run(private: str) -> Dict[str, str]:
    """Mitogen's settings for one run, its socket in the run's private directory (removed however the run ends: an
    interrupted run left it in /tmp). Where that path is too long for a socket, in TMPDIR as Mitogen puts it; where
    even that is too long, Ansible's own strategy: Mitogen's mux cannot bind there, and the run hung."""
    def fits(directory: str) -> bool:
        return len(os.path.join(directory, _MITOGEN_SOCKET).encode()) <= _SOCKET_PATH_MAX
    settings = mitogen_env()
    if settings and fits(private):
        return {**settings, "TMPDIR": private}
    return settings if fits(tempfile.gettempdir()) else {}


def ansible_settings() -> Dict[str, str]:
    """gpuprep's ansible.cfg, and its collection first on the collections path (then the user's own paths,
    or Ansible's defaults, for anything else a play needs)."""
    others = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.pathsep.join(
        [os.path.expanduser("~/.ansible/collections"), "/usr/share/ansible/collections"])
    return {"ANSIBLE_CONFIG": os.path.join(os.path.dirname(os.path.abspath(__file__)), "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join([str(collections_path()), others])}


def artifacts_root() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "gpuprep", "runs")


def keep_runs() -> int:
    """How many run directories stay under artifacts_root(): GPUPREP_KEEP_RUNS, default 100."""
    value = os.environ.get("GPUPREP_KEEP_RUNS", "100")
    if not value.isdigit() or int(value) < 1:
        raise BadInput(f"GPUPREP_KEEP_RUNS={value!r}: expected a whole number >= 1")
    return int(value)


def rotate_runs(root: str, keep: int) -> None:
    """Keep the newest `keep` run directories under `root`, by name (YYYYmmdd-HHMMSS-pid: a directory being emptied
    by a concurrent run has a new mtime). Not ansible-runner's own rotation: it lists, then stats and removes each, so
    a concurrent run removing the same old directory made it raise in its thread, before ansible-playbook started
    (two applies in one second, beside a busy host), and the run waited forever."""
    try:
        names = sorted(entry.name for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return
    for name in names[:max(0, len(names) - keep)]:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)     # another run may have removed it first


def run(request: ApplyRequest, on_update: Optional[Callable[[RunState], None]] = None,
        on_output: Optional[Callable[[str], None]] = None) -> ApplyOutcome:
    """`on_output` receives Ansible's own output as it comes (with -e values and the become password redacted)."""
    validate_tags(list(request.tags) + list(request.skip_tags))
    ensure_ansible_core()
    private = tempfile.mkdtemp(prefix="gpuprep-apply-")
    try:
        inventory, extravars = _target(request, private)
        hosts, groups = read_inventory(inventory, request.limit)
        artifacts = _writable_artifacts()
        rotate_runs(artifacts, keep_runs() - 1)         # this run's directory is the one more
    except BadInput:
        shutil.rmtree(private, ignore_errors=True)
        raise
    extravars.update(request.internal_vars or {})
    extravars.update(request.extravars or {})
    connection = request.connection or Connection()
    ident = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    kwargs = _runner_arguments(request, private, inventory, extravars, artifacts, ident, len(hosts), connection)
    secrets = dict(request.extravars or {})
    if connection.become_password:
        secrets["become password"] = connection.become_password
    state = RunState()
    for name in hosts:
        state.host(name)
    try:
        state, runner, caught = _execute(kwargs, state, on_update, _redacting(on_output, secrets) if on_output else None)
    finally:
        shutil.rmtree(private, ignore_errors=True)
        scrub(os.path.join(artifacts, ident), secrets, kwargs["envvars"])
    state = _ended(state, runner, caught, request.timeout, os.path.join(artifacts, ident))
    if on_update:
        on_update(state)
    return ApplyOutcome(state=state, artifacts=os.path.join(artifacts, ident), status=runner.status,
                        rc=runner.rc, hosts_in_inventory=hosts, signal=caught[0] if caught else None, groups=groups)


def _ended(state: RunState, runner, caught: list, timeout: Optional[int], run_dir: str) -> RunState:
    """The state once the run ended: cancelled (a signal, the timeout) marks the hosts it stopped; a playbook that
    failed before its plays ran (no stats) is an error, BadInput for what Ansible calls bad usage (4, 5)."""
    timed_out = runner.status == "timeout" and not state.finished
    if runner.status in NOT_ENDED and not caught:
        raise GpuprepError(f"ansible-runner stopped before ansible-playbook ended (its error is above; run {run_dir})")
    if caught or timed_out:
        _reap(run_dir)
        return interrupt(state, signal.Signals(caught[0]).name if caught else f"timeout after {timeout} s")
    if not state.finished and runner.rc != 0:
        message = _first_error(runner) or f"ansible-playbook exited with {runner.rc}"
        raise BadInput(message) if runner.rc in (4, 5) else GpuprepError(f"ansible-playbook failed: {message}")
    return state


def _target(request: ApplyRequest, private: str):
    """(inventory, the variables the target needs): this machine through a local inventory, or the user's."""
    if request.local:
        inventory = os.path.join(private, "local-inventory.ini")
        with open(inventory, "w") as fh:
            fh.write("localhost ansible_connection=local\n")
        extravars: Dict[str, object] = {"ansible_python_interpreter": sys.executable}
        if os.geteuid() == 0:
            extravars["ansible_become"] = False      # already root: no sudo needed (or installed)
        return inventory, extravars
    if request.inventory:
        return (os.path.abspath(request.inventory) if os.path.exists(request.inventory) else request.inventory), {}
    raise BadInput(lambda name: f"give an inventory with {name('inventory')}, or {name('local')} for this machine")


def _writable_artifacts() -> str:
    artifacts = artifacts_root()
    try:
        os.makedirs(artifacts, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=artifacts, prefix=".writable-")
        probe.close()
    except OSError as exc:
        raise BadInput(f"state directory {artifacts}: cannot write run records there ({exc.strerror or exc}); "
                       "set XDG_STATE_HOME to a writable directory") from None
    return artifacts


def _runner_arguments(request: ApplyRequest, private: str, inventory: str, extravars: dict, artifacts: str,
                      ident: str, host_count: int, connection: Connection) -> dict:
    """ansible_runner.run_async's arguments for this request (its event handler is added by _execute)."""
    cmdline = (["--check"] if request.check else []) + (["--diff"] if request.diff else []) + connection.argv()
    envvars = {**ansible_settings(),
               "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
               # the ansible CLIs installed beside this interpreter, even in an unactivated venv
               "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               **(_mitogen_for_run(private) if request.mitogen else {})}
    project = str(playbooks_dir())
    # ansible-runner checks the timeout (and the cancel callback) once per pexpect wait, 5 s by default: a
    # --timeout shorter than that let a run finish unchecked. Its settings are read from env/settings only.
    os.makedirs(os.path.join(private, "env"), exist_ok=True)
    with open(os.path.join(private, "env", "settings"), "w") as fh:
        fh.write("pexpect_timeout: 0.25\n")
    return dict(private_data_dir=private, project_dir=project, playbook=os.path.join(project, request.playbook),
                inventory=inventory, ident=ident, artifact_dir=artifacts,
                forks=request.forks or max(1, min(host_count, 50)), quiet=True, extravars=extravars or None,
                limit=request.limit, tags=",".join(request.tags) or None,
                skip_tags=",".join(request.skip_tags) or None, cmdline=shlex.join(cmdline) or None,
                suppress_env_files=True, envvars=envvars, passwords=connection.passwords(),
                # facts live in memory: a jsonfile cache under the artifacts would hold each host's environment
                # and fail on a host name with '/' in it
                fact_cache_type="memory",
                # rotate_runs keeps the newest runs, before this one starts
                rotate_artifacts=0, verbosity=request.verbosity or None, timeout=request.timeout)


def _execute(kwargs: dict, state: RunState, on_update, on_output):
    """Run ansible-playbook; its event handler only enqueues, and this thread reduces the queue into the state.
    Returns (state, the runner, the signals that cancelled it)."""
    import ansible_runner
    events: "queue.Queue[dict]" = queue.Queue()

    def enqueue(event: dict) -> bool:
        events.put(event)
        return True

    with _signals_cancel() as caught:
        kwargs.update(event_handler=enqueue, cancel_callback=lambda: bool(caught))
        thread, runner = ansible_runner.run_async(**kwargs)
        state = _drain(events, runner, thread, state, on_update, on_output)
        thread.join()
    while not events.empty():
        state = reduce(state, events.get(), time.monotonic())
    return state, runner, caught


def _redacting(write: Callable[[str], None], secrets: Dict[str, object]) -> Callable[[str], None]:
    from .artifacts import redact, secret_strings
    known = secret_strings(secrets)
    return lambda text: write(redact(text, known))


NOT_ENDED = ("starting", "running", "unstarted")


def _drain(events: "queue.Queue[dict]", runner, thread: threading.Thread, state: RunState,
           on_update: Optional[Callable[[RunState], None]],
           on_output: Optional[Callable[[str], None]] = None) -> RunState:
    """Reduce the events until the run has ended: its status says so, or its thread is gone (one that raised
    leaves the status where it was, and waiting on it would be waiting forever)."""
    while True:
        try:
            event = events.get(timeout=0.2)
        except queue.Empty:
            if (runner.status not in NOT_ENDED or not thread.is_alive()) and events.empty():
                return state
            continue
        state = reduce(state, event, time.monotonic())
        if on_output and event.get("stdout"):
            on_output(event["stdout"])
        if on_update:
            on_update(state)


def _reap(run_dir: str) -> None:
    """Kill what a cancelled run left behind. ansible-runner kills ansible-playbook's process group, but
    Mitogen's connection multiplexer is a fork of it in a session of its own and would live on. Every process
    of the run carries the run's directory in its environment (AWX_ISOLATED_DATA_DIR, set by ansible-runner)."""
    import psutil
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid != os.getpid() and proc.environ().get("AWX_ISOLATED_DATA_DIR") == run_dir:
                proc.kill()
        except (psutil.Error, OSError):
            continue


@contextlib.contextmanager
def _signals_cancel():
    """While a run goes on, SIGINT and SIGTERM only note themselves: ansible-runner's cancel callback
    sees the note and stops ansible-playbook, and the caller still reports what each host got to."""
    caught: List[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _first_error(runner) -> Optional[str]:
    try:
        text = runner.stdout.read()
    except Exception:
        return None
    for line in text.splitlines():
        if "ERROR" in line:
            return line.replace("[ERROR]: ", "").replace("ERROR! ", "").strip()
    return None
