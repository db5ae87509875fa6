"""Command line: parse, call the library, render, map errors to exit codes. Heavy imports stay
inside the commands that need them."""
from __future__ import annotations

import os
import sys
from typing import List, Optional, Sequence

import click

from . import __version__
from .errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, GpuprepError


def _emit_error(message: str, code: int) -> None:
    click.echo(f"gpuprep: error: {message}", err=True)
    sys.exit(code)


def main(argv: Optional[Sequence[str]] = None) -> None:
    try:
        cli.main(args=argv, prog_name="gpuprep", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _emit_error(exc.format_message(), EXIT_BAD_INPUT)
    except click.exceptions.Abort:
        _emit_error("aborted", EXIT_FAILED)
    except GpuprepError as exc:
        if os.environ.get("GPUPREP_DEBUG") == "1":
            raise
        _emit_error(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _emit_error("interrupted", 130)
    except Exception as exc:  # a bug: one line unless asked for the traceback
        if os.environ.get("GPUPREP_DEBUG") == "1":
            raise
        _emit_error(f"internal error: {type(exc).__name__}: {exc} (set GPUPREP_DEBUG=1 for the traceback)",
                    EXIT_FAILED)
    sys.exit(EXIT_OK)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuprep")
def cli() -> None:
    """Check, tune and burn in GPU nodes for training."""


def _gather(sources: List[str], root: str, no_docker: bool, allow_mixed: bool = False):
    if sources:
        from .importers import import_files
        return import_files(sources, allow_mixed)
    from .probe import collect
    return collect(root=root, docker=not no_docker)


@cli.command()
@click.option("--from", "sources", multiple=True, metavar="FILE",
              help="Judge captures instead of this host (nvidia-smi [-q [-x]], topo -m, numactl -H, lscpu, dmesg, snapshot JSON). Repeat to combine.")
@click.option("-o", "--output", metavar="FILE", help="Write here (atomically) instead of stdout.")
@click.option("--root", default="/", hidden=True, help="Read /proc and /sys below this directory (tests).")
@click.option("--no-docker", is_flag=True, help="Do not query the Docker daemon.")
def snapshot(sources, output, root, no_docker):
    """Write the host's facts as a snapshot JSON document."""
    from .output import check_destination, write_atomic
    if output:
        check_destination(output)
    snap = _gather(list(sources), root, no_docker)
    text = snap.to_json()
    if output:
        write_atomic(output, text + "\n")
    else:
        click.echo(text)


@cli.command()
@click.option("--from", "sources", multiple=True, metavar="FILE",
              help="Judge captures instead of this host. Repeat to combine several files of one host.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (snapshot + findings).")
@click.option("--profile", metavar="NAME|FILE.toml", help="Node profile: dev, training, inference, or a TOML file.")
@click.option("--skip", multiple=True, metavar="ID", help="Waive a check id (or a whole area). Repeatable.")
@click.option("--only", multiple=True, metavar="AREA", help="Only this area (or id). Repeatable.")
@click.option("--require-gpu", is_flag=True, help="Fail when no NVIDIA driver/GPU is present.")
@click.option("-v", "--verbose", is_flag=True, help="Show passing checks too.")
@click.option("--facts-only", is_flag=True, help="Show the facts without judging them.")
@click.option("--root", default="/", hidden=True)
@click.option("--no-docker", is_flag=True, help="Do not query the Docker daemon.")
@click.option("--allow-mixed", is_flag=True, help="Judge --from captures as one host even when they look like different hosts'.")
def check(sources, as_json, profile, skip, only, require_gpu, verbose, facts_only, root, no_docker, allow_mixed):
    """Gather facts (or read captures), judge them, report findings. Exit 1 if any check fails."""
    from .errors import BadInput
    from .rules import Context, check_filters, judge_all, select

    try:
        check_filters(skip, only)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    chosen = {}
    if profile:
        from .profiles import load as load_profile
        chosen = load_profile(profile)
    snap = _gather(list(sources), root, no_docker, allow_mixed)
    findings, waived = (None, []) if facts_only else \
        select(judge_all(snap, Context(profile=chosen, require_gpu=require_gpu)), skip, only)
    if as_json:
        from .report import check_document, to_json
        click.echo(to_json(check_document(snap, findings or [], waived)))
    else:
        from .report.terminal import render
        click.echo(render(snap, findings, colour=sys.stdout.isatty(), verbose=verbose, waived=waived), nl=False)
    if findings and any(f.severity == "fail" for f in findings):
        sys.exit(EXIT_FAILED)


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
    from .rules.compat import judge_combination
    findings = judge_combination(driver, cuda, cudnn, torch_version, gpu, cc)
    if as_json:
        from .report import summary, to_json
        from .rules import worst
        click.echo(to_json({"schema": "gpuprep.compat/1", "verdict": worst(findings), "summary": summary(findings),
                            "findings": [f.to_dict() for f in findings]}))
    else:
        from .report.terminal import Writer, render_findings
        out = Writer(sys.stdout.isatty())
        render_findings(findings, out, verbose=True)
        click.echo(out.text(), nl=False)
    if any(f.severity == "fail" for f in findings):
        sys.exit(EXIT_FAILED)


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
    from .ncclenv import environment, facts_from_snapshot, host_facts, render_env_file
    snap = _gather(list(sources), "/", True) if sources else None
    facts = host_facts(root or "/") if (root or not snap) else facts_from_snapshot(snap)
    if default_interface:
        facts["default_interface"] = default_interface
    if snap is not None:
        gpu_count = len(snap.gpus or [])
    else:
        from .burnin import detect_gpus
        gpu_count = detect_gpus()
    env = environment(facts, gpu_count, socket_ifname, _key_values(overrides, "--set"))
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
        click.option("-e", "--extra-vars", "extra_vars", multiple=True, metavar="KEY=VALUE", help="Role variable. Repeatable."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON document with per-host results."),
        click.option("--no-mitogen", is_flag=True, help="Use Ansible's own strategy instead of Mitogen's."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _run_playbook(playbook, inventory, limit, local, forks, extra_vars, as_json, no_mitogen, tags=(), skip_tags=(),
                  check=False, diff=False):
    from .ansible.runner import ApplyRequest, parse_extravars, run
    from .ansible.view import line_view, live_view, summary_table
    request = ApplyRequest(playbook=playbook, inventory=inventory, limit=limit, local=local, forks=forks,
                           extravars=parse_extravars(extra_vars), tags=_split(tags), skip_tags=_split(skip_tags),
                           check=check, diff=diff, mitogen=not no_mitogen)
    if request.local and request.inventory:
        from .errors import BadInput
        raise BadInput("give either -i INVENTORY or --local, not both")
    if as_json:
        outcome = run(request)
    elif sys.stderr.isatty():
        with live_view() as on_update:
            outcome = run(request, on_update)
    else:
        outcome = run(request, line_view(lambda line: click.echo(line, err=True)))
    state = outcome.state
    succeeded = state.finished and all(h.succeeded and h.final for h in state.hosts.values())
    if as_json:
        import json as _json
        click.echo(_json.dumps({"schema": "gpuprep.apply/1", "playbook": playbook, "check": check, "ok": succeeded,
                                "artifacts": outcome.artifacts, "interrupted": state.interrupted,
                                "hosts": {n: h.to_dict() for n, h in sorted(state.hosts.items())}}, indent=2))
    else:
        if diff:
            from .ansible.view import diff_text
            click.echo(diff_text(state), nl=False)
        click.echo(summary_table(state, outcome.artifacts), nl=False)
    if outcome.signal:
        sys.exit(128 + outcome.signal)
    if not succeeded:
        sys.exit(EXIT_FAILED)


def _split(values):
    return [t.strip() for v in values for t in v.split(",") if t.strip()]


@cli.command()
@_apply_options
@click.option("--tags", multiple=True, help="Only these roles: driver_pin, gpu_persistence, gpu_clocks, container_toolkit, nccl_env, system_tuning.")
@click.option("--skip-tags", multiple=True, help="Skip these roles.")
@click.option("--check", is_flag=True, help="Change nothing; report what would change.")
@click.option("--diff", is_flag=True, help="Show the changes to files.")
@click.option("--full", is_flag=True,
              help="Run every task, even in roles whose host still holds what their last full run left.")
def apply(inventory, limit, local, forks, extra_vars, as_json, no_mitogen, tags, skip_tags, check, diff, full):
    """Tune GPU nodes with gpuprep's Ansible roles (through ansible-runner). Exit 0 only if every host succeeded."""
    if full:
        extra_vars = (*extra_vars, "gpuprep_fast_rerun=false")
    _run_playbook("apply.yml", inventory, limit, local, forks, extra_vars, as_json, no_mitogen, tags, skip_tags,
                  check, diff)


@cli.command()
@_apply_options
@click.option("--tags", multiple=True, help="Only these roles, comma-separated (default: every role).")
def revert(inventory, limit, local, forks, extra_vars, as_json, no_mitogen, tags):
    """Put back everything apply recorded (files, units, values, held packages, clocks)."""
    from .ansible.runner import ROLE_TAGS
    from .errors import BadInput
    unknown = [t for t in _split(tags) if t not in ROLE_TAGS]
    if unknown:
        raise BadInput(f"unknown role(s) {', '.join(unknown)} (roles: {', '.join(ROLE_TAGS)})")
    _run_playbook("revert.yml", inventory, limit, local, forks, extra_vars, as_json, no_mitogen, tags)


@cli.command()
@click.option("--duration", default="60s", show_default=True, help="Time budget, e.g. 20s, 2m.")
@click.option("--nproc", default="auto", show_default=True, help="Ranks per node: auto = one per GPU, or 2 on a CPU-only host.")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True)
@click.option("-i", "--inventory", help="Run on every host of this Ansible inventory; the first host is the rendezvous.")
@click.option("--master", metavar="HOST:PORT", help="Rendezvous of a multi-node run (default with -i: first host, port 29517).")
@click.option("--nnodes", type=click.IntRange(1, 4096), default=1, show_default=True, help="Nodes in this run (one launch per node).")
@click.option("--node-rank", type=click.IntRange(0, 4095), default=0, show_default=True)
@click.option("--rdzv-timeout", type=click.FloatRange(5, 3600), default=60, show_default=True, help="Seconds to wait for every node.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("-o", "--output", metavar="FILE", help="Also write the JSON report here (checked before the run, written atomically).")
def burnin(duration, nproc, backend, inventory, master, nnodes, node_rank, rdzv_timeout, as_json, output):
    """Short torchrun DDP burn-in: every rank trains, all-reduce bandwidth sweep, memory check, straggler named."""
    import json as _json

    from .burnin import launch, parse_duration, torch_available
    from .burnin.judge import judge, report_document
    from .errors import BadInput
    seconds = parse_duration(duration)
    if output:
        from .output import check_destination
        check_destination(output)
    if node_rank >= nnodes:
        raise BadInput(f"--node-rank {node_rank} must be below --nnodes {nnodes}")
    if nnodes > 1 and not master:
        raise BadInput("--nnodes > 1 needs --master HOST:PORT (the rendezvous on node rank 0)")
    if inventory:
        from .burnin.fleet import run_fleet
        run = run_fleet(inventory, seconds, nproc, backend, master, rdzv_timeout)
        chosen = next(iter(run.ranks.values()))["backend"] if run.ranks else backend
    else:
        if not torch_available():
            raise BadInput("PyTorch is not installed: pip install 'gpuprep[burnin]' (or torch) to run the burn-in")
        chosen, per_node = _burnin_plan(nproc, backend)
        if not as_json:
            click.echo(f"burn-in: {per_node} rank(s) x {nnodes} node(s), backend {chosen}, {seconds:.0f} s", err=True)
        with _phase_progress(not as_json and sys.stderr.isatty()) as on_progress:
            run = launch(seconds, per_node, chosen, nnodes=nnodes, node_rank=node_rank, master=master,
                         rdzv_timeout=rdzv_timeout, on_progress=on_progress)
    findings = judge(run)
    document = report_document(run, findings, chosen, seconds)
    if output:
        from .output import write_atomic
        write_atomic(output, _json.dumps(document, indent=2) + "\n")
    if as_json:
        click.echo(_json.dumps(document, indent=2))
    else:
        for rank in document["ranks"]:
            sweep = rank.get("allreduce", [])
            largest = sweep[-1] if sweep else {}
            click.echo(f"  rank {rank['rank']} {rank['host']} {rank['device']}: step {rank['median_step_ms']} ms, "
                       f"compute {rank['median_compute_ms']} ms, all-reduce {largest.get('bytes', 0) >> 20} MiB "
                       f"busbw {largest.get('busbw_gbs', 0):.2f} GB/s, memory {'ok' if rank['memory']['ok'] else 'BAD'}")
        for f in findings:
            click.echo(f"  {f.severity.upper():4}  {f.id}  {f.title}")
        click.echo(f"{document['verdict'].upper()}: burn-in took {run.wall_seconds:.1f} s")
    if document["verdict"] == "fail":
        sys.exit(EXIT_FAILED)


def _burnin_plan(nproc, backend):
    from .burnin import detect_gpus
    from .errors import BadInput
    gpus = detect_gpus()
    if backend == "nccl" and not gpus:
        raise BadInput("--backend nccl needs NVIDIA GPUs; this host has none (use gloo)")
    chosen = backend if backend != "auto" else ("nccl" if gpus else "gloo")
    if nproc == "auto":
        return chosen, (gpus if chosen == "nccl" else 2)
    if nproc.isdigit() and int(nproc) >= 1:
        return chosen, int(nproc)
    raise BadInput(f"--nproc {nproc!r} is not a positive number or 'auto'")


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


if __name__ == "__main__":
    main()
