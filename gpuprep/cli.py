"""Command line: parse, call the library, render, map errors to exit codes. Heavy imports stay
inside the commands that need them."""
from __future__ import annotations

import os
import re
import sys
from typing import List, Optional, Sequence

import click

from . import __version__
from . import errors, options
from .errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from .formats import BY_EXTENSION, FORMATS


FLAGS = options.FLAGS      # a library error about an argument is shown with the flag the user typed


# click's own endings in front of gpuprep's table (errors.EXITS): (exception type, exit code, message, debug).
EXITS = (
    (click.exceptions.Exit, lambda e: e.exit_code, None, False),
    (click.ClickException, lambda e: EXIT_BAD_INPUT, lambda e, flags: e.format_message(), False),
    (click.exceptions.Abort, lambda e: EXIT_FAILED, lambda e, flags: "aborted", False),
) + errors.EXITS


def _wants_json(argv: Sequence[str]) -> bool:
    """Errors are a JSON document on stdout too when the command line asks for JSON (read before click parses it,
    since a parse error must be answered in the same form)."""
    args = list(argv)
    return "--json" in args or "--format=json" in args or any(
        a == "--format" and i + 1 < len(args) and args[i + 1] == "json" for i, a in enumerate(args))


def main(argv: Optional[Sequence[str]] = None) -> None:
    """parse -> call -> render -> exit code: each command returns its exit code; errors go through EXITS."""
    as_json = _wants_json(sys.argv[1:] if argv is None else argv)
    try:
        code = cli.main(args=argv, prog_name="gpuprep", standalone_mode=False)
    except Exception as exc:      # noqa: BLE001 (mapped by the table; a bug included)
        code = _failed(exc, as_json)
    except KeyboardInterrupt as exc:
        code = _failed(exc, as_json)
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def _failed(exc: BaseException, as_json: bool) -> int:
    code, message, debug = errors.exit_for(exc, FLAGS, EXITS)
    if debug and os.environ.get("GPUPREP_DEBUG") == "1":
        raise exc
    if message is not None:
        click.echo(f"gpuprep: error: {message}", err=True)
        if as_json:
            from .report import error_document, to_json
            click.echo(to_json(error_document(message, code)))
    return code


def _verdict_exit(document: dict, interrupted: Optional[int] = None) -> int:
    if interrupted:             # Ctrl-C / SIGTERM: what was not done is reported as interrupted
        return 128 + interrupted
    return EXIT_FAILED if document["verdict"] == "fail" else EXIT_OK


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuprep")
def cli() -> None:
    """Check, tune and burn in GPU nodes for training."""


def _gather(sources: List[str], root: str, no_docker: bool, allow_mixed: bool = False):
    from . import api
    return api.snapshot(sources, root=root, docker=not no_docker, allow_mixed=allow_mixed)


def _connection_options(fn):
    """-u, --private-key, --become-method, -K as ansible-playbook takes them; gathered in the click context."""
    def keep(ctx, param, value):
        ctx.meta.setdefault("connection", {})[param.name] = value
        return value
    options = [
        click.option("-u", "--user", "user", metavar="USER", expose_value=False, callback=keep,
                     help="Connect as this user (Ansible's remote_user)."),
        click.option("--private-key", "private_key", metavar="FILE", expose_value=False, callback=keep,
                     type=click.Path(exists=True, dir_okay=False), help="SSH private key file."),
        click.option("--become-method", "become_method", metavar="METHOD", expose_value=False, callback=keep,
                     help="sudo (default), su, doas, ..."),
        click.option("-K", "--ask-become-pass", "ask_become_pass", is_flag=True, expose_value=False, callback=keep,
                     help="Ask for the become (sudo) password; it is never written to artifacts or logs."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _connection():
    """The Connection the current command's options ask for (prompting for -K's password here, once)."""
    from .ansible.runner import Connection
    from .errors import BadInput
    given = click.get_current_context().meta.get("connection", {})
    method = given.get("become_method")
    if method is not None and not re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*", method):
        raise BadInput(f"--become-method {method!r}: expected a become plugin name (sudo, su, doas, "
                       "community.general.pbrun, ...)")
    password = None
    if given.get("ask_become_pass"):
        import getpass
        import warnings
        try:
            with warnings.catch_warnings():     # a password piped in (no terminal) is read, not warned about
                warnings.simplefilter("ignore", getpass.GetPassWarning)
                password = click.prompt("BECOME password", hide_input=True, err=True, default="", show_default=False)
        except click.exceptions.Abort:
            raise BadInput("-K: no become password was read (the prompt needs a terminal on standard input)") from None
    return Connection(user=given.get("user"), private_key=given.get("private_key"),
                      become_method=given.get("become_method"), become_password=password,
                      no_become=bool(given.get("no_become")))


def _fleet_options(fn):
    options = [
        click.option("-i", "--inventory", help="Every host of this Ansible inventory (the probe runs there with "
                                               "python3; nothing is installed)."),
        click.option("--limit", help="Only hosts matching this Ansible pattern (with -i)."),
        click.option("--forks", type=click.IntRange(1, 500), help="Hosts probed at once (default: up to 50)."),
        click.option("--no-become", "no_become", is_flag=True, expose_value=False,
                     callback=lambda ctx, param, value: ctx.meta.setdefault("connection", {}).update(no_become=value),
                     help="With -i: probe as the connecting user, without sudo (the kernel log may then be unreadable "
                          "where dmesg_restrict is set)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return _connection_options(fn)


@cli.command()
@click.option("--from", "sources", multiple=True, metavar="FILE",
              help="Judge captures instead of this host (nvidia-smi [-q [-x]], topo -m, numactl -H, lscpu, dmesg, snapshot JSON). Repeat to combine.")
@click.option("-o", "--output", metavar="FILE|DIR", help="Write here (atomically) instead of stdout; with -i, a directory for one file per host.")
@_fleet_options
@click.option("--root", default="/", hidden=True, help="Read /proc and /sys below this directory (tests).")
@click.option("--no-docker", is_flag=True, help="Do not query the Docker daemon.")
def snapshot(sources, output, inventory, limit, forks, root, no_docker):
    """Write the host's facts as a snapshot JSON document (with -i: every host's, one file each)."""
    from . import api
    from .output import check_destination, write_atomic
    if inventory:
        from .errors import BadInput
        if not output or not os.path.isdir(output):
            raise BadInput("snapshot -i needs -o DIR, an existing directory for one snapshot file per host")
        with _fleet_progress(True) as on_update:
            members, cancelled = api.gather_fleet(inventory, limit=limit, forks=forks, connection=_connection(),
                                                  on_update=on_update)
        for path in api.save_fleet(members, output):
            click.echo(path)
        if cancelled:
            return 128 + cancelled
        return EXIT_FAILED if any(m.snapshot is None for m in members) else EXIT_OK
    if output:
        check_destination(output)
    text = _gather(list(sources), root, no_docker).to_json()
    if output:
        write_atomic(output, text + "\n")
    else:
        click.echo(text)


def _fleet_progress(progress: bool):
    """apply's live per-host view while a fleet is probed, on a terminal; plain lines on stderr otherwise."""
    import contextlib

    from .ansible.view import line_view, live_view
    if progress and sys.stderr.isatty():
        return live_view()
    return contextlib.nullcontext(line_view(lambda line: click.echo(line, err=True)))


def _format_options(fn):
    options = [
        click.option("--format", "fmt", type=click.Choice(FORMATS),
                     help="Output format (default text; -o FILE.prom/.xml/.html/.json picks by extension)."),
        click.option("--json", "as_json", is_flag=True, help="Shorthand for --format json."),
        click.option("-o", "--output", metavar="FILE", help="Write the report here (atomically) instead of stdout."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn




def _chosen_format(fmt, as_json, output) -> str:
    if as_json and fmt and fmt != "json":
        from .errors import BadInput
        raise BadInput(f"--json and --format {fmt} contradict each other")
    if as_json:
        return "json"
    if fmt:
        return fmt
    if not output:
        return "text"
    suffix = os.path.splitext(output)[1].lower()
    if suffix and suffix not in BY_EXTENSION:       # report.pdf holding text would be a lie about its content
        from .errors import BadInput
        raise BadInput(f"-o {output}: gpuprep does not write {suffix} files; use one of "
                       f"{', '.join(sorted(BY_EXTENSION))}, or --format with any name")
    return BY_EXTENSION.get(suffix, "text")


def _emit(document: dict, fmt: str, output, verbose: bool = False, drift_groups: bool = False) -> None:
    from .report import render
    if output:
        from .output import write_atomic
        write_atomic(output, render(document, fmt, colour=False, verbose=verbose, drift_groups=drift_groups))
        click.echo(f"gpuprep: wrote {output} ({fmt}, verdict {document['verdict']})", err=True)
    else:
        colour = sys.stdout.isatty() and fmt == "text"
        click.echo(render(document, fmt, colour=colour, verbose=verbose, drift_groups=drift_groups), nl=False)


_CHECK_FROM = ("Judge captures instead of this host. Repeat to combine several files of one host; snapshot files of "
               "several hosts, or a directory of them (snapshot -i -o DIR), are judged as a fleet.")


@cli.command()
@options.click_options(options.with_help(options.JUDGING[:1], "--from", _CHECK_FROM, "FILE|DIR"))
@_fleet_options
@click.option("--drift", "show_drift", is_flag=True, help="Fleet: show every drifting fact with its groups of hosts.")
@click.option("--baseline", metavar="HOST|SNAPSHOT", help="Fleet: measure drift against this host or snapshot "
                                                          "instead of the majority. One host: report what changed "
                                                          "since this snapshot of it (gpuprep snapshot -o FILE).")
@_format_options
@options.click_options(options.JUDGING[1:])
@click.option("--require-gpu", is_flag=True, help="Fail when no NVIDIA driver/GPU is present.")
@click.option("-v", "--verbose", is_flag=True, help="Show passing checks too.")
@click.option("--facts-only", is_flag=True, help="Show the facts without judging them.")
@click.option("--root", default="/", hidden=True)
@click.option("--no-docker", is_flag=True, help="Do not query the Docker daemon.")
@click.option("--deep", is_flag=True, help="Also start containers: the GPU smoke test (docker run --gpus all ... "
              "nvidia-smi -L) and the /dev/shm and memlock a container gets; and DCGM's diagnostics where DCGM is "
              "installed (dcgmi diag, dcgmi health).")
@click.option("--dcgm-level", type=click.IntRange(1, 4), default=1, show_default=True,
              help="With --deep: dcgmi diag's level (2-4 load the GPUs for minutes to hours).")
@click.option("--allow-mixed", is_flag=True, help="Judge --from captures as one host even when they look like different hosts'.")
def check(sources, inventory, limit, forks, show_drift, baseline, fmt, as_json, output, profile, skip, only,
          require_gpu, verbose, facts_only, root, no_docker, deep, dcgm_level, allow_mixed):
    """Gather facts (or read captures), judge them, report findings. Exit 1 if any check (or host) fails."""
    from . import api
    from .errors import BadInput
    fmt = _chosen_format(fmt, as_json, output)
    if output:
        from .output import check_destination
        check_destination(output)
    if inventory and sources:
        raise BadInput("give either -i INVENTORY or --from files, not both")
    members = None if inventory else api.saved_fleet(sources)
    if inventory or members is not None:
        if deep:
            raise BadInput("--deep runs on this host only; across a fleet the container_toolkit role runs the smoke test")
        return _check_fleet(members, inventory, limit, forks, fmt, output, verbose, show_drift, profile_name=profile,
                            require_gpu=require_gpu, skip=skip, only=only, baseline=baseline)
    if show_drift:
        raise BadInput("--drift compares hosts: give -i INVENTORY or snapshots of several hosts")
    if facts_only:
        return _facts_only(sources, root, no_docker, allow_mixed, fmt, require_gpu)
    document = api.check(sources, profile_name=profile, require_gpu=require_gpu, skip=skip, only=only, root=root,
                         docker=not no_docker, deep=deep, allow_mixed=allow_mixed, dcgm_level=dcgm_level,
                         baseline=baseline).document()
    _emit(document, fmt, output, verbose)
    return _verdict_exit(document)


def _facts_only(sources, root, no_docker, allow_mixed, fmt, require_gpu) -> int:
    if require_gpu:
        from .errors import BadInput
        raise BadInput("--facts-only judges nothing, so --require-gpu cannot fail it: drop one of them")
    snap = _gather(list(sources), root, no_docker, allow_mixed)
    if fmt == "text":
        from .report.terminal import render_facts_only
        click.echo(render_facts_only(snap, colour=sys.stdout.isatty()), nl=False)
    else:
        click.echo(snap.to_json())
    return EXIT_OK


def _check_fleet(members, inventory, limit, forks, fmt, output, verbose, show_drift, **judging):
    """`members`: a saved fleet already read, or None to gather the inventory's."""
    from . import api
    if inventory:
        with _fleet_progress(fmt == "text") as on_update:
            result = api.check_fleet(inventory=inventory, limit=limit, forks=forks, connection=_connection(),
                                     on_update=on_update, **judging)
    else:
        result = api.check_fleet(members, **judging)
    document = result.document()
    _emit(document, fmt, output, verbose, drift_groups=show_drift)
    return _verdict_exit(document, result.cancelled)


@cli.command()
@click.argument("traces", nargs=-1, required=True, metavar="TRACE|DIR...")
@click.option("--from", "node_sources", multiple=True, metavar="FILE",
              help="The node the job ran on, as a snapshot or captures (gpuprep snapshot -o node.json); "
                   "its PCIe links, NUMA layout, throttling and NCCL transport join the judgement. Repeatable.")
@click.option("--node", "live_node", is_flag=True, help="Join this host's facts (the job ran here).")
@click.option("--compare", "compare", is_flag=True, help="Two runs, BEFORE AFTER (a trace or directory each): the "
                                                         "change in step time and whether each cause is gone.")
@_format_options
@click.option("-v", "--verbose", is_flag=True, help="Show the per-rank summary lines too.")
def diagnose(traces, node_sources, live_node, compare, fmt, as_json, output, verbose):
    """Why a training job under-uses its GPUs, from its PyTorch profiler traces (*.pt.trace.json[.gz], one per
    rank, or a directory of them): HTA's per-rank breakdown and the cause with its fix (job.* ids, docs/checks.md).
    Exit 0 nothing failed, 1 a finding failed, 2 a trace that cannot be read."""
    from . import api
    from .errors import BadInput
    fmt = _chosen_format(fmt, as_json, output)
    if output:
        from .output import check_destination
        check_destination(output)
    if node_sources and live_node:
        raise BadInput("give --from captures of the node or --node for this host, not both")
    if compare:
        if len(traces) != 2:
            raise BadInput(f"--compare takes two runs, BEFORE AFTER (a trace or a directory each); got {len(traces)}")
        document = api.compare([traces[0]], [traces[1]]).document()
        _emit(document, fmt, output, verbose)
        return _verdict_exit(document)
    node = api.snapshot(list(node_sources)) if node_sources else api.snapshot() if live_node else None
    document = api.diagnose(list(traces), node=node).document()
    _emit(document, fmt, output, verbose)
    return _verdict_exit(document)


@cli.command(context_settings={"allow_interspersed_args": False})
@click.argument("command", nargs=-1, metavar="[-- COMMAND ...]")
@click.option("--pid", type=int, help="Watch this running job: a torchrun agent, a rank, or any process whose "
                                      "children are the ranks.")
@click.option("--job", "job_id", metavar="JOBID", help="Watch this running Slurm job on all its nodes: one watcher a "
              "node, started as a step of the job (srun --overlap), merged here.")
@click.option("--until", type=click.Choice(["warn", "fail"]), help="With --pid or --job: stop once a problem this "
              "bad (or worse) has stood for 3 samples (with --job, and the culprit node's own check has arrived, up "
              "to 90 s more), and report (for automation: exit 1 on fail). The job itself runs on.")
@click.option("--drain", is_flag=True, help="With --job: drain the node found at fault (a node answer only), with "
                                            "the health check's reason format.")
@click.option("--job-node", "job_node", metavar="JOBID", hidden=True,
              help="The watcher on one node of a job (what --job starts through srun): JSON lines on stdout.")
@click.option("-i", "--inventory", help="Watch a job across the hosts of this Ansible inventory (no Slurm): one "
              "watcher a host, for --duration, merged here. With --master.")
@click.option("--master", metavar="ADDR:PORT", help="With -i: the job's ranks are the processes whose MASTER_ADDR and "
              "MASTER_PORT are these (as torchrun's --master-addr/--master-port, or the rendezvous, set them).")
@click.option("--node-of", "node_of", metavar="ADDR:PORT", hidden=True,
              help="The watcher on one host of a job (what -i starts through Ansible): JSON lines on stdout.")
@click.option("--duration", metavar="DURATION", help="Sample this long (30s, 5m); default: until the job ends or "
                                                     "Ctrl-C.")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between samples.")
@click.option("--from", "node_sources", multiple=True, metavar="FILE", help="The node's snapshot or captures to join.")
@click.option("--node", "live_node", is_flag=True, help="Join this host's facts (gpuprep check's probe).")
@_format_options
@click.option("-v", "--verbose", is_flag=True, help="Show the per-rank summary lines too.")
@_connection_options
def watch(command, pid, job_id, until, drain, job_node, inventory, master, node_of, duration, interval, node_sources,
          live_node, fmt, as_json, output, verbose):
    """Why a running training job under-uses its GPUs, without touching its code: samples its ranks (NVML, /proc,
    py-spy stacks of the main threads) and names the bottleneck with the same job.* ids as diagnose. `watch --pid
    PID`, or `watch -- torchrun ... train.py` to start the job (its exit code is passed through). Needs py-spy for
    the stacks (installed with gpuprep) and permission to trace the job (root, the same user, or SYS_PTRACE)."""
    from . import api
    from .errors import BadInput
    fmt = _chosen_format(fmt, as_json, output)
    if output:
        from .output import check_destination
        check_destination(output)
    if node_sources and live_node:
        raise BadInput("give --from captures of the node or --node for this host, not both")
    from .burnin import parse_duration
    seconds = parse_duration(duration, shortest=1) if duration else None
    if job_node or node_of:
        return _node_watcher(job_node, node_of, interval, seconds)
    if drain and not job_id:
        raise BadInput("--drain is for a job watched with --job: give --job JOBID")
    if until and (inventory or master or not (job_id or pid)):
        raise BadInput("--until stops the watch, not the job: it is for a running job watched with --pid or --job")
    if job_id:
        return _watch_job(job_id, seconds, interval, until, drain, fmt, output, verbose)
    if inventory or master:
        return _watch_inventory(inventory, master, seconds, interval, fmt, output, verbose)
    node = api.snapshot(list(node_sources)) if node_sources else api.snapshot(docker=False) if live_node else None
    return _watch_here(pid, command, node, seconds, interval, until, fmt, output, verbose)


def _watch_here(pid, command, node, seconds, interval, until, fmt, output, verbose) -> int:
    """watch --pid / watch -- COMMAND: the job on this host."""
    from . import api
    live = _live_line if sys.stderr.isatty() and fmt == "text" and not output else None
    # a machine-read document on stdout keeps it to itself: the job's own output goes to stderr then
    job_stdout = sys.stderr if fmt != "text" and not output else None
    result = api.watch(pid, command=list(command) if command else None, seconds=seconds, interval=interval,
                       node=node, on_sample=live, job_stdout=job_stdout, until=until)
    document = result.document()
    _emit(document, fmt, output, verbose)
    return _watch_exit(result.facts, document)


NODE_CHECK_GRACE_S = 90     # watch -i: a node's own check this slow hangs there; the answer is then "not known"


def _node_watcher(job_node, node_of, interval, seconds) -> int:
    """The watcher on one node of a job across nodes (started by srun for --job, by Ansible for -i): JSON lines."""
    from . import api
    from .job.nodewatch import JobProcesses, node_watch
    if job_node:
        return node_watch(JobProcesses.of_slurm_job(job_node, os.environ.get("SLURM_STEP_ID")), interval, seconds,
                          api.node_problems)
    # Ansible hands the lines back only at the end: the node's own check, still running then, is waited for
    return node_watch(JobProcesses.of_rendezvous(node_of), interval, seconds, api.node_problems,
                      check_grace=NODE_CHECK_GRACE_S)


def _watch_exit(facts, document) -> int:
    """The job's own exit code; a job killed by signal N, or a watch stopped by it, exits 128+N as shells do;
    else the verdict's."""
    code = facts.exit_code
    if code is not None and code < 0:
        return 128 - code
    if code:
        return code
    if facts.signal:
        return 128 + facts.signal
    return _verdict_exit(document)


def _live_line(facts, findings) -> None:
    """One line per sample on a terminal: each rank's GPU (utilisation, SM clock, power and memory against their
    maxima), where its main thread is, and the verdict so far."""
    def last(values):
        known = [v for v in values if v is not None]
        return f"{known[-1]:.0f}%" if known else "-"
    def who(rank):
        return f"rank {rank.rank}" if rank.rank is not None else f"pid {rank.pid}"
    parts = [f"{who(r)}: GPU {last(r.gpu_util_pct)} SM {last(r.sm_clock_pct)} power {last(r.power_pct)} "
             f"mem {last(r.memory_pct)} {r.last_stack or ''}".rstrip() for r in facts.ranks]
    causes = sorted({f"{f.id} ({f.subject})" for f in findings if f.severity in ("warn", "fail")})
    verdict = "so far: " + (", ".join(causes) if causes else "nothing wrong")
    click.echo(f"[{facts.samples:4d}] " + " | ".join(parts + [verdict]), err=True)


def _watch_job(job_id, seconds, interval, until, drain, fmt, output, verbose) -> int:
    from . import api
    live = _job_line if sys.stderr.isatty() and fmt == "text" and not output else None
    result = api.watch_slurm_job(job_id, seconds=seconds, interval=interval, on_sample=live, until=until, drain=drain)
    document = result.document()
    _emit(document, fmt, output, verbose)
    return 128 + result.facts.signal if result.facts.signal else _verdict_exit(document)


def _watch_inventory(inventory, master, seconds, interval, fmt, output, verbose) -> int:
    from . import api
    from .errors import BadInput
    if not (inventory and master):
        raise BadInput("watch -i INVENTORY --master ADDR:PORT: give both (the hosts, and where the job's ranks meet)")
    if seconds is None:
        raise BadInput("watch -i: give --duration (each host's watcher samples that long, then reports)")
    document = api.watch_inventory_job(inventory, master, seconds=seconds, interval=interval,
                                       connection=_connection()).document()
    _emit(document, fmt, output, verbose)
    return _verdict_exit(document)


def _job_line(facts, findings) -> None:
    """Per sample on a terminal, one line a rank: its node, GPU, where its main thread is; then the verdict so far."""
    causes = sorted({f"{f.id} ({f.subject})" for f in findings if f.severity in ("warn", "fail")})
    click.echo(f"[{facts.samples:4d}] " + ("so far: " + ", ".join(causes) if causes else "so far: nothing wrong"),
               err=True)
    for r in facts.ranks:
        where = (r.sites[-1][0] or r.sites[-1][1]) if r.sites and any(r.sites[-1]) else ""
        state = "ended" if r.ended else "node lost" if r.node_lost else (r.last_stack or "-")
        click.echo(f"       rank {r.rank if r.rank is not None else '?'} {r.host or '-'} GPU {(r.gpu or '-')[:12]} "
                   f"{state} {where}".rstrip(), err=True)


@cli.command()
@click.option("--driver", required=True, help="NVIDIA driver version, e.g. 535.104.05")
@click.option("--cuda", help="CUDA toolkit/runtime version, e.g. 12.4")
@click.option("--cudnn", help="cuDNN version, e.g. 9.1.0")
@click.option("--torch", "torch_version", help="PyTorch version with its variant, e.g. 2.5.1+cu124")
@click.option("--gpu", help='GPU name as nvidia-smi prints it, e.g. "NVIDIA H100 80GB HBM3"')
@click.option("--cc", help="Compute capability, e.g. 9.0")
@click.option("--json", "as_json", is_flag=True)
def compat(driver, cuda, cudnn, torch_version, gpu, cc, as_json):
    """Will this driver / CUDA / cuDNN / PyTorch / GPU combination work? No host needed."""
    from . import api
    findings = api.compat(driver, cuda=cuda, cudnn=cudnn, torch=torch_version, gpu=gpu, cc=cc)
    from .report import compat_document, to_json
    document = compat_document(findings)
    if as_json:
        click.echo(to_json(document))
    else:
        from .report.terminal import Writer, render_findings
        out = Writer(sys.stdout.isatty())
        render_findings(findings, out, verbose=True, verdict=document["verdict"])
        click.echo(out.text(), nl=False)
    return EXIT_FAILED if any(f.severity == "fail" for f in findings) else EXIT_OK


@cli.command()
@click.option("--from", "sources", multiple=True, metavar="FILE",
              help="Plan for captures (topo -m, numactl -H, lscpu, -q, a snapshot) instead of this host. Repeatable.")
@click.option("--nproc-per-node", "--nproc", "nproc", type=int, help="Ranks on this node (default: one per GPU; "
                                                                      "required without GPUs, for CPU ranks).")
@click.option("--mode", type=click.Choice(["exclusive", "node", "socket"]), default="exclusive", show_default=True,
              help="CPU binding, as torchrun --numa-binding computes it.")
@click.option("--cuda-visible-devices", "visible", metavar="LIST",
              help="The GPUs the ranks see, in order (indexes or UUIDs; default on this host: $CUDA_VISIBLE_DEVICES).")
@_format_options
def plan(sources, nproc, mode, visible, fmt, as_json, output):
    """Per-rank launch plan: GPU, NUMA node, CPUs, memory node, nearest NIC, threads, DataLoader workers."""
    from . import api
    from .report import plan_document
    fmt = _chosen_format(fmt, as_json, output)
    if fmt not in ("text", "json"):
        from .errors import BadInput
        raise BadInput(f"--format {fmt}: a plan is text or json")
    facts = _gather(list(sources), "/", True, allow_mixed=True) if sources else None
    here = facts is None       # this host: its CUDA_VISIBLE_DEVICES and the CPUs this process may use
    if here and visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    document = plan_document(api.plan(facts, ranks=nproc, mode=mode, visible=visible,
                                      allowed=os.sched_getaffinity(0) if here else None))
    _emit(document, fmt, output)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--plan", "plan_file", metavar="FILE", help="A plan saved with gpuprep plan --json -o FILE "
                                                         "(otherwise each rank plans from this host's facts).")
@click.option("--mode", type=click.Choice(["exclusive", "node", "socket"]), default="exclusive", show_default=True,
              help="CPU binding when planning here (without --plan).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def launch(plan_file, mode, command):
    """Run COMMAND as one rank, placed by the plan (torchrun --no-python gpuprep launch [--plan F] -- CMD)."""
    from . import api
    api.launch(command, plan_file=plan_file, mode=mode)


@cli.command("nccl-env")
@click.option("--from", "sources", multiple=True, metavar="FILE",
              help="GPUs (and, without --root, the host's facts) from a snapshot/captures instead of this host.")
@click.option("--root", metavar="DIR", help="Read /proc and /sys below DIR (a chroot or an image), as the role's sysroot.")
@click.option("--default-interface", help="Interface of the default route, when the facts do not say (captures).")
@click.option("--socket-ifname", help="NCCL_SOCKET_IFNAME's interface, as the role's nccl_env_socket_ifname.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a variable, as nccl_env_overrides. Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="The variables as one JSON object instead of the file.")
def nccl_env(sources, root, default_interface, socket_ifname, overrides, as_json):
    """Print the file the nccl_env role writes to /etc/gpuprep/env for this host (same code, same facts)."""
    from . import api
    from .ncclenv import render_env_file
    env = api.nccl_env(list(sources), root=root, default_interface=default_interface, socket_ifname=socket_ifname,
                       overrides=_key_values(overrides, "--set"))
    if as_json:
        import json
        click.echo(json.dumps(env, indent=2, sort_keys=True))
    else:
        click.echo(render_env_file(env), nl=False)


def _key_values(pairs, option):
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            from .errors import BadInput
            raise BadInput(f"{option} {pair!r}: expected KEY=VALUE")
        out[key] = value
    return out


def _apply_options(fn):
    options = [
        click.option("-i", "--inventory", help="Any Ansible inventory: INI, YAML, a directory, or a comma list."),
        click.option("--limit", help="Only hosts matching this Ansible pattern."),
        click.option("--local", is_flag=True, help="This machine, without an inventory."),
        click.option("--forks", type=click.IntRange(1, 500), help="Parallel hosts (default: the inventory's size)."),
        click.option("-e", "--extra-vars", "extra_vars", multiple=True, metavar="VARS",
                     help="Role variables as ansible-playbook takes them: 'k=v k2=v2', a JSON/YAML mapping, or "
                          "@FILE.yml. Repeatable; later values win."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON document with per-host results."),
        click.option("--no-mitogen", is_flag=True, help="Use Ansible's own strategy instead of Mitogen's."),
        click.option("-v", "--verbose", "verbosity", count=True, help="Stream Ansible's own output (-vvv: more)."),
        click.option("--timeout", "run_timeout", type=click.IntRange(1, 7 * 86400), metavar="SECONDS",
                     help="Cancel the run after this long; the summary marks the hosts it stopped."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return _connection_options(fn)


def _run_playbook(call, as_json, verbosity, diff=False, **arguments) -> int:
    """api.apply or api.revert with this command line's connection and progress view; the summary, then the exit
    code: 0 when every host succeeded."""
    from .ansible.view import line_view, live_view, summary_table
    arguments.update(connection=_connection(), verbosity=verbosity)
    if diff:
        arguments["diff"] = True
    if verbosity:       # Ansible's own output on stderr instead of the progress view (stdout stays the report)
        result = call(on_output=lambda text: click.echo(text, err=True), **arguments)
    elif as_json:
        result = call(**arguments)
    elif sys.stderr.isatty():
        with live_view() as on_update:
            result = call(on_update=on_update, **arguments)
    else:
        result = call(on_update=line_view(lambda line: click.echo(line, err=True)), **arguments)
    if as_json:
        from .report import to_json
        click.echo(to_json(result.document()))
    else:
        if diff:
            from .ansible.view import diff_text
            click.echo(diff_text(result.outcome.state), nl=False)
        click.echo(summary_table(result.outcome.state, result.outcome.artifacts), nl=False)
    if result.interrupted_by:
        return 128 + result.interrupted_by
    return EXIT_OK if result.succeeded else EXIT_FAILED


def _playbook_arguments(inventory, limit, local, forks, extra_vars, no_mitogen, run_timeout) -> dict:
    from .ansible.runner import parse_extravars
    return dict(inventory=inventory, limit=limit, local=local, forks=forks, variables=parse_extravars(extra_vars),
                mitogen=not no_mitogen, timeout=run_timeout)


def _split(values, option: str = "--tags"):
    """Comma-separated names; an option given with nothing in it (`--tags ' , '`) is an error, never 'all'."""
    names = [t.strip() for v in values for t in v.split(",") if t.strip()]
    if values and not names:
        from .errors import BadInput
        raise BadInput(f"{option} {', '.join(map(repr, values))}: names no role (give role names, or leave it out)")
    return names


@cli.command()
@_apply_options
@click.option("--tags", multiple=True, help="Only these roles (or system_tuning's concerns: system_tuning_ssh, ...), "
                                           "comma-separated; gpuprep_agent runs only when named. An unknown name is "
                                           "refused with the list of roles.")
@click.option("--skip-tags", multiple=True, help="Skip these roles.")
@click.option("--check", is_flag=True, help="Change nothing; report what would change.")
@click.option("--diff", is_flag=True, help="Show the changes to files.")
@click.option("--full", is_flag=True,
              help="Run every task, even in roles whose host still holds what their last full run left.")
def apply(inventory, limit, local, forks, extra_vars, as_json, no_mitogen, verbosity, run_timeout, tags, skip_tags,
          check, diff, full):
    """Tune GPU nodes with gpuprep's Ansible roles (through ansible-runner). Exit 0 only if every host succeeded."""
    from . import api
    return _run_playbook(api.apply, as_json, verbosity, diff=diff, tags=_split(tags),
                         skip_tags=_split(skip_tags, "--skip-tags"), check=check, full=full,
                         **_playbook_arguments(inventory, limit, local, forks, extra_vars, no_mitogen, run_timeout))


@cli.command()
@_apply_options
@click.option("--tags", multiple=True, help="Only these roles, comma-separated (default: every role).")
def revert(inventory, limit, local, forks, extra_vars, as_json, no_mitogen, verbosity, run_timeout, tags):
    """Put back everything apply recorded (files, units, values, held packages, clocks)."""
    from . import api
    return _run_playbook(api.revert, as_json, verbosity, tags=_split(tags),
                         **_playbook_arguments(inventory, limit, local, forks, extra_vars, no_mitogen, run_timeout))


@cli.command()
@click.option("--duration", default="60s", show_default=True,
              help="The ranks' working time, e.g. 20s, 2m: half training (counted from the first step), 30% the "
                   "all-reduce sweep, the rest the memory check. Start-up comes on top: the interpreter, torch's "
                   "import, the rendezvous and the model's build, typically 5-15 s (the report's wall_seconds).")
@click.option("--nproc", default="auto", show_default=True, help="Ranks per node: auto = one per GPU, or 2 on a CPU-only host.")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True)
@click.option("-i", "--inventory", help="Run on every host of this Ansible inventory; the first host is the rendezvous.")
@click.option("--master", metavar="HOST:PORT", help="Rendezvous of a multi-node run (default with -i: first host, port 29517).")
@click.option("--nnodes", type=click.IntRange(1, 4096), help="Nodes in this run (one launch per node; default 1, or "
                                                            "inside a Slurm allocation its node count).")
@click.option("--node-rank", type=click.IntRange(0, 4095), help="This node's rank (default 0, or Slurm's SLURM_NODEID).")
@click.option("--rdzv-timeout", type=click.FloatRange(5, 3600), default=60, show_default=True, help="Seconds to wait for every node.")
@click.option("--baseline", metavar="REPORT", help="A passing burn-in report of this node (--json -o): warn when "
                                                   "all-reduce busbw drops over 5% below it (PCIe and NVL boxes "
                                                   "have no published figure).")
@click.option("--store", metavar="STORE", help="Keep this run's GPUs in a results store: a SQLite file (created when "
                                               "missing) or postgresql://USER@HOST[:PORT]/DB (password in PGPASSWORD).")
@click.option("--compare-fleet", metavar="STORE", help="Judge each GPU against the same model's GPUs in this "
                                                       "results store (the last 90 days); this run is kept there.")
@_format_options
@_connection_options
def burnin(duration, nproc, backend, inventory, master, nnodes, node_rank, rdzv_timeout, baseline, store, compare_fleet,
           fmt, as_json, output):
    """Short torchrun DDP burn-in: every rank trains, all-reduce bandwidth sweep, memory check, straggler named."""
    from . import api
    from .burnin import parse_duration
    seconds = parse_duration(duration)
    fmt = _chosen_format(fmt, as_json, output)
    quiet = fmt != "text" or bool(output)
    if output:
        from .output import check_destination
        check_destination(output)
    if nproc != "auto" and not (nproc.isdigit() and int(nproc) >= 1):
        from .errors import BadInput
        raise BadInput(f"--nproc {nproc!r} is not a positive number or 'auto'")
    nnodes, node_rank, master = _allocation(nnodes, node_rank, master, inventory)
    for path in {p for p in (store, compare_fleet) if p}:
        api.ready_store(path)           # an unreachable store fails now, not after the run

    def started(backend_chosen, per_node):
        if not quiet:
            click.echo(f"burn-in: {per_node} rank(s) x {nnodes} node(s), backend {backend_chosen}, {seconds:.0f} s",
                       err=True)
    with _phase_progress(not quiet and not inventory and sys.stderr.isatty()) as on_progress:
        result = api.burnin(seconds, ranks=None if nproc == "auto" else int(nproc), backend=backend, nnodes=nnodes,
                            node_rank=node_rank, master=master, rdzv_timeout=rdzv_timeout, inventory=inventory,
                            connection=_connection() if inventory else None, on_start=started,
                            on_progress=on_progress, baseline=baseline)
    if compare_fleet:
        api.compare_with_fleet(result, compare_fleet)
    document = result.document()
    for path in {p for p in (store, compare_fleet) if p}:
        api.store_burnin(document, path)
    _emit(document, fmt, output)
    return _verdict_exit(document)


@cli.group()
def fleet():
    """The fleet's burn-in history (a results store: a SQLite file or a postgresql:// URL)."""


@fleet.command("report")
@click.argument("store", metavar="STORE")
@click.option("--days", type=click.FloatRange(0.01, 3650), default=90, show_default=True,
              help="Only the runs of the last DAYS days.")
@_format_options
def fleet_report(store, days, fmt, as_json, output):
    """The GPUs persistently slowest for their model, and the ones slower than their own earlier runs."""
    from . import api
    fmt = _chosen_format(fmt, as_json, output)
    document = api.fleet_report(store, days=days)
    _emit(document, fmt, output, verbose=False)
    return _verdict_exit(document)


def _allocation(nnodes, node_rank, master, inventory):
    """--nnodes, --node-rank and --master as given; inside a Slurm allocation of several nodes (srun, one task per
    node) what is not given comes from Slurm: its node count, this node's id, and its first node at port 29517."""
    if nnodes is None and node_rank is None and not inventory:
        from .slurm import allocation
        found = allocation(os.environ)
        if found:
            return found[0], found[1], master or f"{found[2]}:29517"
    return nnodes or 1, node_rank or 0, master


def _phase_progress(enabled):
    import contextlib
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    @contextlib.contextmanager
    def bar():
        with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True) as progress:
            task = progress.add_task("starting ranks", total=1.0)
            yield lambda p: progress.update(task, description=p.get("phase", ""), completed=float(p.get("done", 0)))
    return bar()


def _node_hook(name: str, summary: str):
    """A command the node probe runs too (gpuprep-probe.pyz NAME ...): one parser, the probe's, so the options are
    the same wherever it runs; `gpuprep NAME -h` shows them."""
    @cli.command(name, help=summary + f" Options: gpuprep {name} -h.", add_help_option=False,
                 context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
    @click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
    def command(arguments):
        from .probe_main import main as probe_main
        return probe_main([name, *arguments], prog="gpuprep")
    return command


_node_hook("slurm", "Slurm's HealthCheckProgram, Prolog or Epilog (slurm healthcheck|prolog|epilog): drain this node "
                    "with gpuprep's reason when it fails, resume a node gpuprep drained once it is healthy (and, "
                    "if asked, has passed a burn-in); another drain is never touched.")
_node_hook("npd", "node-problem-detector custom plugin: exit 0 healthy, 1 a problem, 2 unknown, with one line "
                  "of at most 80 characters that starts with the check id and subject.")
_node_hook("nagios", "Nagios/Icinga plugin: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN, one status line with "
                     "performance data.")


@cli.command()
@click.option("-o", "--output", required=True, metavar="FILE.pyz", help="Where to write the zipapp.")
def zipapp(output):
    """Write the node probe as one file for plain ansible-playbook (check.yml, the gpuprep_agent role):
    run by python3 >= 3.8 on a node with nothing installed."""
    from . import api
    click.echo(api.zipapp(output))


if __name__ == "__main__":
    main()
