"""The options both command lines take, defined once: the CLI (click) and the node probe (argparse, since the
zipapp carries no click) build theirs from these rows; and the flag that sets each library argument, so an error
about an argument names the flag the user typed. Standard library only."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence


@dataclass(frozen=True)
class Option:
    flag: str
    dest: str
    metavar: str
    help: str
    repeatable: bool = False


# judging a node: `gpuprep check` and the node's slurm, npd and nagios hooks
JUDGING = (
    Option("--from", "sources", "FILE", "Judge captures or a snapshot instead of this host. Repeat to combine.",
           repeatable=True),
    Option("--profile", "profile", "NAME|FILE.toml", "Node profile: dev, training, inference, or a TOML file (its "
                                                     "act_on says which severities a hook acts on)."),
    Option("--skip", "skip", "ID", "Waive a check id (or a whole area). Repeatable.", repeatable=True),
    Option("--only", "only", "AREA", "Only this area (or id). Repeatable.", repeatable=True),
)

# library argument -> the flag that sets it
FLAGS = {"driver": "--driver", "cuda": "--cuda", "cudnn": "--cudnn", "torch": "--torch", "gpu": "--gpu", "cc": "--cc",
         "duration": "--duration", "master": "--master", "nnodes": "--nnodes", "node_rank": "--node-rank",
         "backend": "--backend", "ranks": "--nproc", "plan": "--plan", "baseline": "--baseline", "output": "-o",
         "extra_vars": "-e", "dcgm_level": "--dcgm-level", "skip": "--skip", "only": "--only", "tags": "--tags",
         "inventory": "-i", "local": "--local", "paths": "TRACE", "pid": "--pid", "command": "COMMAND",
         "seconds": "--duration", "interval": "--interval", "sources": "--from", "profile": "--profile",
         "profile_name": "--profile", "age": "--burnin-within", "burnin_within": "--burnin-within",
         "require_burnin": "--require-burnin", "budget": "--budget", "directory": "-o", "root": "--root",
         "default_interface": "--default-interface", "socket_ifname": "--socket-ifname", "overrides": "--set", "deep": "--deep",
         "job_report": "--job-report", "require_gpu": "--require-gpu",
         "drain_slow_gpu": "--drain-slow-gpu"}


def with_help(options: Sequence[Option], flag: str, text: str, metavar: str = "") -> tuple:
    """The rows with one option's help (and metavar) worded for a command."""
    return tuple(replace(o, help=text, metavar=metavar or o.metavar) if o.flag == flag else o for o in options)


def add_arguments(parser, options: Sequence[Option]) -> None:
    """The rows as argparse arguments."""
    for o in options:
        extra = {"action": "append", "default": []} if o.repeatable else {}
        parser.add_argument(o.flag, dest=o.dest, metavar=o.metavar, help=o.help, **extra)


def click_options(options: Sequence[Option]):
    """The rows as click options, a decorator (click is imported only by the CLI)."""
    import click

    def decorate(fn):
        for o in reversed(options):
            fn = click.option(o.flag, o.dest, multiple=o.repeatable, metavar=o.metavar, help=o.help)(fn)
        return fn
    return decorate
