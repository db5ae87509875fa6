"""The probe's entry point on a node (the zipapp's __main__ calls main): the standard library and what
the zipapp bundles only, no click. `snapshot` prints the host's snapshot; `textfile` judges the host and
writes node_exporter's textfile (temp file and rename, so the collector never reads half a file); `slurm`,
`npd` and `nagios` hand the verdict to a scheduler or a monitor (`gpuprep slurm|npd|nagios` are these too)."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .errors import exit_for
from .options import FLAGS


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
    slurm.add_argument("--drain-slow-gpu", metavar="REPORT.json",
                       help="drain this node when this burn-in report of it names one of its GPUs slow against its "
                            "peers (burnin.slow-gpu; the reason names the GPU). Without it a slow GPU is a warning "
                            "in the report only")
    slurm.add_argument("--baseline-dir", default="/run/gpuprep/slurm", metavar="DIR",
                       help="where the prolog notes each job's start for its epilog (default /run/gpuprep/slurm)")
    slurm.add_argument("--job-report", metavar="DIR",
                       help="epilog: write the job's GPU report to DIR/job-JOB.report.json: how busy each of its GPUs "
                            "was (NVML accounting, `nvidia-smi -am 1`) and why, from a `gpuprep watch` of the job "
                            "left there as job-JOB.watch.json")
    slurm.add_argument("--budget", type=_seconds, default=45.0, metavar="SECONDS",
                       help="give up (change nothing, exit 0) when the whole hook, from the interpreter's start, "
                            "takes longer (default 45, below Slurm's 60 s)")
    for name, text in (("npd", "node-problem-detector custom plugin: exit 0 healthy, 1 a problem, 2 unknown; one "
                               "line of at most 80 characters"),
                       ("nagios", "Nagios/Icinga plugin: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; one status line")):
        monitor = commands.add_parser(name, help=text, description=text)
        _judging(monitor)
        monitor.add_argument("--require-gpu", action="store_true",
                             help="a host where no GPU could be judged (no driver, NVML down, no GPU) is a problem, "
                                  "not healthy: for GPU nodes")
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
    from .options import JUDGING, add_arguments
    add_arguments(parser, JUDGING)


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
        code, message, _ = exit_for(exc, FLAGS)
        sys.stderr.write(f"{prog}: error: {message}\n")
        if args.command == "snapshot":     # the controller reads why as data, not from stderr's words
            sys.stdout.write(_probe_error(message) + "\n")
        return code


def _probe_error(message: str) -> str:
    import json
    import socket

    from .snapshot import PROBE_ERROR_SCHEMA
    return json.dumps({"schema": PROBE_ERROR_SCHEMA, "host": socket.gethostname(), "status": "probe-failed",
                       "problem": message})


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
    result = api.check(profile_name=args.profile, docker=not args.no_docker)
    write_atomic(args.output, render(result.document(), "prometheus"))
    return 0




def _judging_arguments(args) -> dict:
    return dict(sources=args.sources, profile_name=args.profile, skip=args.skip, only=args.only)


def _npd(args):
    from . import api
    return api.npd(**_judging_arguments(args), require_gpu=args.require_gpu)


def _nagios(args):
    from . import api
    return api.nagios(**_judging_arguments(args), require_gpu=args.require_gpu)


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
        code, line = unknown(exit_for(exc, FLAGS)[1])
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
        line = f"gpuprep slurm {args.hook}: the node was left as it was: {exit_for(exc, FLAGS)[1]}"
        slurm.journal([line])
        sys.stderr.write(line + "\n")
        return 0


def _slurm_hook(args) -> int:
    from . import api
    from .slurm import process_age
    # the hook's budget counts from the interpreter's start: Slurm's own timeout does
    budget = max(0.001, args.budget - process_age())
    code, line = api.slurm_hook(args.hook, **_judging_arguments(args), node=args.node, scontrol=args.scontrol,
                                require_burnin=args.require_burnin, burnin_within=args.burnin_within,
                                baseline_dir=args.baseline_dir, budget=budget, job_report=args.job_report,
                                drain_slow_gpu=args.drain_slow_gpu)
    sys.stderr.write(line + "\n")
    return code


if __name__ == "__main__":      # last: main() uses the tables above (python -m gpuprep.probe_main)
    sys.exit(main())
