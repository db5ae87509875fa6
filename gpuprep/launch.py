"""`gpuprep launch -- CMD`: one rank of a torchrun job, placed as the launch plan says. torchrun starts it as the
entry point (`torchrun --no-python gpuprep launch ...`); it takes LOCAL_RANK's part of the plan, binds this process
to those CPUs (inherited across exec), prefers the rank's memory node through numactl when the host has it, sets
the rank's environment (threads, NIC, device order) and execs the command. I/O only: the plan is plan.py's."""
from __future__ import annotations

import json
import os
import shutil
from typing import Callable, Dict, List, Optional, Sequence

from .errors import BadInput, bad_argument
from .parsers.values import compress_cpulist
from .report import PLAN_SCHEMA
from .plan import LaunchPlan, Rank, local_rank


def load_plan(path: str) -> LaunchPlan:
    from .parsers import read_capture      # bounded: a regular file of at most 64 MiB
    try:
        document = json.loads(read_capture(path))
    except BadInput as exc:
        raise bad_argument("plan", f"{exc}") from None
    except (ValueError, RecursionError):
        raise bad_argument("plan", f"{path}: not JSON (write it with gpuprep plan --json -o FILE)") from None
    schema = document.get("schema") if isinstance(document, dict) else None
    if not isinstance(schema, str) or not schema.startswith("gpuprep.plan/"):
        raise bad_argument("plan", f"{path}: not a gpuprep plan document (gpuprep plan --json -o FILE)")
    if schema != PLAN_SCHEMA:
        raise bad_argument("plan", f"{path}: schema {schema[:40]!r} is not {PLAN_SCHEMA!r}, the one this gpuprep reads "
                       "(plan again with this version)")
    try:
        return LaunchPlan.from_dict(document)
    except BadInput as exc:
        raise bad_argument("plan", f"{path}: {exc}") from None


def _say(line: str) -> None:
    import sys
    sys.stderr.write(f"gpuprep launch: {line}\n")


def rank_plan(plan_file: Optional[str], mode: str, environ: Dict[str, str], planner: Callable[..., LaunchPlan]) -> Rank:
    if "LOCAL_RANK" not in environ:
        _say("LOCAL_RANK is not set (not started by torchrun?): running as local rank 0")
    rank = local_rank(environ)
    if plan_file:
        plan = load_plan(plan_file)
        import socket
        if plan.host and plan.host != socket.gethostname():
            _say(f"the plan was made on {plan.host}, not on this host ({socket.gethostname()}): its CPUs, NICs and "
                 f"thread counts are that host's")
    else:
        size = environ.get("LOCAL_WORLD_SIZE")
        # torchrun says how many ranks share this host; outside it this process is the one rank (local rank 0),
        # one GPU's worth of the host or, without GPUs, one CPU rank
        nproc = int(size) if size and size.isdigit() else (None if "LOCAL_RANK" in environ else 1)
        plan = planner(ranks=nproc, mode=mode, visible=environ.get("CUDA_VISIBLE_DEVICES"),
                        allowed=os.sched_getaffinity(0))
    if rank >= len(plan.ranks):
        raise BadInput(f"LOCAL_RANK={rank}, but the plan has {len(plan.ranks)} ranks")
    return plan.ranks[rank]


def command_line(rank: Rank, command: Sequence[str], numactl: Optional[str]) -> List[str]:
    # --preferred, not --membind: the rank's memory comes from its node while the node has room, and from the
    # other node after that instead of the kernel killing the job
    if numactl and rank.memory_node is not None:
        return [numactl, f"--preferred={rank.memory_node}", "--", *command]
    return list(command)


def run(plan_file: Optional[str], mode: str, command: Sequence[str], planner: Callable[..., LaunchPlan]) -> None:
    """Does not return: execs the command (or raises BadInput before anything changed). `planner` (api.plan) plans
    this host when no plan file is given."""
    if not command:
        raise BadInput("nothing to launch: gpuprep launch [--plan FILE] -- COMMAND ...")
    environ = dict(os.environ)
    rank = rank_plan(plan_file, mode, environ, planner)
    allowed = os.sched_getaffinity(0)
    cpus = set(rank.cpus) & allowed
    if not cpus:
        raise BadInput(f"local rank {rank.local_rank}: the plan's CPUs {rank.cpulist} are not available here "
                       f"(this process may use {compress_cpulist(allowed)}): a plan for another machine?")
    os.sched_setaffinity(0, cpus)
    environ.update(rank.env)     # over torchrun's OMP_NUM_THREADS=1
    environ["GPUPREP_LAUNCH_CPUS"] = compress_cpulist(cpus)
    if shutil.which(command[0], path=environ.get("PATH")) is None:
        raise BadInput(f"{command[0]}: command not found" if os.sep not in command[0]
                       else f"{command[0]}: no such executable file")
    argv = command_line(rank, command, shutil.which("numactl"))
    os.execvpe(argv[0], argv, environ)
