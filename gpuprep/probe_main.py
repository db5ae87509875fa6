"""The probe's entry point on a node (the zipapp's __main__ calls main): the standard library and what
the zipapp bundles only, no click. `snapshot` prints the host's snapshot; `textfile` judges the host and
writes node_exporter's textfile (temp file and rename, so the collector never reads half a file); `slurm`,
`npd` and `nagios` hand the verdict to a scheduler or a monitor (`gpuprep slurm|npd|nagios` are these too)."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .errors import exit_for


def _parser(prog: str = "gpuprep-probe") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="gpuprep's node probe")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("snapshot", help="print this host's snapshot (JSON)",
                        description="Print this host's facts as a snapshot (JSON): nothing is judged.")
    textfile = commands.add_parser("textfile", help="judge this host, write Prometheus text for node_exporter")
    textfile.add_argument("-o", "--output", required=True, metavar="FILE.prom")
    textfile.add_argument("--profile", metavar="NAME|FILE.toml")
    textfile.add_argument("--no-docker", action="store_true")
    slurm = commands.add_parser("slurm", help="Slurm's HealthCheckProgram, Prolog or Epilog: drain this node on a "
                                              "failing verdict, resume it when healthy",
                                description="Slurm's HealthCheckProgram, Prolog or Epilog: judge this node, drain it "
                                            "with the check id as the reason (\"gpu.xid GPU3 (gpuprep)\": sinfo -R "
                                            "shows the id) when it fails, resume a node gpuprep drained once healthy "
                                            "(and, with --require-burnin, after a passing burn-in of this node run "
                                            "since the drain). Exit 1 when the node fails (health check, prolog: "
                                            "Slurm requeues the job), else 0; gpuprep's own trouble (no scontrol, "
                                            "the budget run out, another hook holding the lock) changes nothing and "
                                            "exits 0, saying why in the journal.")
    slurm.add_argument("hook", choices=["healthcheck", "prolog", "epilog"])
    _judging(slurm)
    slurm.add_argument("--node", help="Slurm's name for this node (default: $SLURMD_NODENAME, else the short host name)")
    slurm.add_argument("--scontrol", default="scontrol", help="the scontrol to call")
    slurm.add_argument("--require-burnin", metavar="REPORT.json",
                       help="resume a node gpuprep drained only when this burn-in report (gpuprep burnin --json -o) "
                            "passed")
    slurm.add_argument("--burnin-within", metavar="DURATION", help="... and is at most this old (e.g. 24h)")
    slurm.add_argument("--baseline-dir", default="/run/gpuprep/slurm", metavar="DIR",
                       help="where the prolog notes each job's start for its epilog (default /run/gpuprep/slurm)")
    slurm.add_argument("--budget", type=_seconds, default=45.0, metavar="SECONDS",
                       help="give up (change nothing, exit 0) when the whole hook, from the interpreter's start, "
                            "takes longer (default 45, below Slurm's 60 s)")
    for name, text in (("npd", "node-problem-detector custom plugin: exit 0 healthy, 1 a problem, 2 unknown; one "
                               "line of at most 80 characters"),
                       ("nagios", "Nagios/Icinga plugin: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; one status line")):
        _judging(commands.add_parser(name, help=text, description=text))
    return parser


def _seconds(text: str) -> float:
    """A budget: a finite number of seconds, more than 0 and at most an hour."""
    import math
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:20]!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text[:20]!r}: give a number of seconds above 0, at most 3600")
    return value


def _judging(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="sources", action="append", default=[], metavar="FILE",
                        help="judge captures or a snapshot instead of this host")
    parser.add_argument("--profile", metavar="NAME|FILE.toml", help="its act_on says which severities count")
    parser.add_argument("--skip", action="append", default=[], metavar="ID")
    parser.add_argument("--only", action="append", default=[], metavar="AREA")


def main(argv: Optional[Sequence[str]] = None, prog: str = "gpuprep-probe") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        from .probe import collect
        if args.command == "snapshot":
            sys.stdout.write(collect(docker=True).to_json() + "\n")
            return 0
        if args.command in _MONITORS:
            return _monitor(args)
        if args.command == "slurm":
            return _slurm(args)
        return _textfile(args)
    except (Exception, KeyboardInterrupt) as exc:    # noqa: BLE001 (one line, never a traceback in a timer's journal)
        code, message, _ = exit_for(exc, _FLAGS)
        sys.stderr.write(f"{prog}: error: {message}\n")
        return code


TEXTFILE_MIN_PYTHON = (3, 9)     # prometheus-client, bundled for the textfile, annotates with list[...]


def _textfile(args) -> int:
    from . import api
    if sys.version_info < TEXTFILE_MIN_PYTHON:
        from .errors import BadInput
        raise BadInput(f"textfile needs python3 >= {'.'.join(map(str, TEXTFILE_MIN_PYTHON))} (prometheus-client); "
                       f"this is {sys.version.split()[0]}")
    from .output import check_destination, write_atomic
    from .report import render
    check_destination(args.output)
    api.profile(args.profile)                  # a bad profile stops before the host is probed
    result = api.check(profile_name=args.profile, docker=not args.no_docker)
    write_atomic(args.output, render(result.document(), "prometheus"))
    return 0


_FLAGS = {"output": "-o", "profile": "--profile", "skip": "--skip", "only": "--only", "age": "--burnin-within"}


def _judged(args):
    """(the check's result, the findings the profile says to act on) for this host or the captures given."""
    from . import adapters, api
    profile = api.profile(args.profile)
    result = api.check(args.sources, profile_name=args.profile, docker=False, skip=args.skip, only=args.only,
                       allow_mixed=True)
    return result, adapters.problems(result.findings, profile)


def _npd(args):
    from . import adapters
    return adapters.npd(_judged(args)[1])


def _nagios(args):
    from . import adapters
    result, found = _judged(args)
    return adapters.nagios(result.findings, found)


# command -> (judge and word it, exit code and line for what could not be judged): a monitor reads the line on
# standard output, and an error is "unknown" in its own convention, never healthy
_MONITORS = {
    "npd": (_npd, lambda message: _adapters().npd_unknown(message)),
    "nagios": (_nagios, lambda message: _adapters().nagios_unknown(message)),
}


def _adapters():
    from . import adapters
    return adapters


def _monitor(args) -> int:
    judge, unknown = _MONITORS[args.command]
    try:
        code, line = judge(args)
    except Exception as exc:     # noqa: BLE001 (bad input, a failed probe: unknown, in the monitor's words)
        code, line = unknown(exit_for(exc, _FLAGS)[1])
    sys.stdout.write(line + "\n")
    return code


def _slurm(args) -> int:
    """Slurm's hooks, by one exit policy: the node's own failure exits 1 (health check, prolog: Slurm requeues the
    job); gpuprep's own trouble (no scontrol, the budget run out, its state directory unusable, a bad option, a
    lock another hook holds) never fails a hook, since Slurm drains a node whose prolog or epilog fails: it leaves
    the node as it was, says why in the journal and on stderr, and exits 0."""
    from . import slurm
    try:
        return _slurm_hook(args)
    except Exception as exc:     # noqa: BLE001 (gpuprep's own trouble, whatever it is, must not drain the node)
        line = f"gpuprep slurm {args.hook}: the node was left as it was: {exit_for(exc, _FLAGS)[1]}"
        slurm.journal([line])
        sys.stderr.write(line + "\n")
        return 0


def _slurm_hook(args) -> int:
    """Within the budget (counted from the interpreter's start), under the node's lock: judge, then drain, resume
    or leave the node; the epilog counts only Xid lines new since the job started and exits 0 once it drained."""
    import os
    import socket
    import time

    from . import slurm
    within = slurm.parse_age(args.burnin_within) if args.burnin_within else None
    name = slurm.node_name(args.node)
    job = os.environ.get("SLURM_JOB_ID", "")
    budget = args.budget - _process_age()
    with _budget(budget):
        lock = slurm.HookLock(args.baseline_dir)
        if not lock.acquire(0 if args.hook == "healthcheck" else budget):
            from .errors import GpuprepError
            raise GpuprepError("another gpuprep hook holds this node's lock (it judges and acts now)")
        try:
            facts_at = time.time()
            facts = _hook_facts(args, job)
            from . import adapters, api
            profile = api.profile(args.profile)
            result = api.check(facts=facts, profile_name=args.profile, skip=args.skip, only=args.only)
            found = adapters.problems(result.findings, profile)
            gpus = [v for g in facts.gpus or [] for v in (g.uuid, g.pci_bus_id) if v]
            gate = slurm.Gate(args.require_burnin, within, socket.gethostname(), gpus)
            outcome = slurm.act(name, found, slurm.Scontrol(args.scontrol), gate, facts_at=facts_at)
        finally:
            lock.release()
    sys.stderr.write(f"gpuprep slurm {args.hook}: node {name}: {outcome.action.kind} ({outcome.action.why})\n")
    return 1 if found and args.hook in ("healthcheck", "prolog") else 0


def _process_age() -> float:
    """Seconds since this process started (the interpreter's start counts against a hook's budget): /proc's
    start time in clock ticks since boot against the uptime; 0 where /proc cannot tell."""
    import os
    try:
        with open("/proc/self/stat") as fh:
            started = int(fh.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as fh:
            return max(0.0, float(fh.read().split()[0]) - started)
    except (OSError, ValueError, IndexError):
        return 0.0


def _hook_facts(args, job: str):
    """The node's facts; the prolog notes how many Xid lines the kernel log holds, the epilog keeps only the lines
    that came after (a rotated log: all of them)."""
    from . import api, slurm
    facts = api.snapshot(args.sources, docker=False, allow_mixed=True)
    if args.hook == "prolog" and job:
        slurm.record_baseline(job, len(facts.xids) if facts.xids is not None else None, args.baseline_dir)
    if args.hook == "epilog" and job:
        before = slurm.read_baseline(job, args.baseline_dir)
        if before is not None and facts.xids is not None and len(facts.xids) >= before:
            facts.xids = facts.xids[before:]
    return facts


class _Budget(BaseException):     # not an Exception: no "except Exception" in the probe may swallow it
    pass


def _budget(seconds: float):
    """Stop judging after `seconds` (SIGALRM): a GpuprepError that changes nothing on the node."""
    import contextlib
    import signal

    from .errors import GpuprepError

    @contextlib.contextmanager
    def limited():
        def expired(signum, frame):
            raise _Budget()
        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, max(0.001, seconds))
        try:
            yield
        except _Budget:
            raise GpuprepError(f"judging took longer than the budget of {seconds:g} s: the node was left as "
                               "it was") from None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    return limited()


if __name__ == "__main__":      # last: main() uses the tables above (python -m gpuprep.probe_main)
    sys.exit(main())
