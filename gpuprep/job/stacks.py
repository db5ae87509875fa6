"""What a rank's main thread is doing, from one Python stack (py-spy's frames, innermost first): pure. The classes
are the watch's evidence: a main thread mostly in the DataLoader is data-bound, in .item()/synchronize sync-bound,
in a collective's wait communication-bound, in the model's forward/backward or optimizer launching compute."""
from __future__ import annotations

import re
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

CLASSES = ("dataloader", "sync", "collective", "compute_launch", "other")

Frame = Tuple[str, str]      # (function, file)
# (class, test of one frame): the first frame, from the innermost out, that any test takes decides
_FRAME_TESTS: Sequence[Tuple[str, Callable[[str, str], bool]]] = (
    ("dataloader", lambda name, path: "torch/utils/data/" in path),
    ("collective", lambda name, path: "torch/distributed/" in path or name in ("wait", "barrier") and
     "distributed" in path),
    ("sync", lambda name, path: name in ("synchronize", "item", "tolist", "_local_scalar_dense") or
     ("torch/cuda/" in path and name == "synchronize")),
    ("compute_launch", lambda name, path: "torch/nn/" in path or "torch/autograd/" in path or
     "torch/optim/" in path or "torch/_tensor.py" in path and name == "backward"),
)
# torch.distributed's start-up: waiting there for the other ranks to start is no collective of a step
_STARTUP = frozenset(("init_process_group", "rendezvous", "_store_based_barrier", "_create_c10d_store",
                      "_env_rendezvous_handler", "_tcp_rendezvous_handler"))
# a source line that blocks on the GPU although no Python frame names it (.item() is a C method)
_SYNC_LINE = re.compile(r"\.(item|cpu|tolist|numpy)\(\)|\.synchronize\(|cuda\.synchronize|torch\.cuda\.Event\(")


def classify(frames: Sequence[Frame], source_line: Optional[Callable[[str, int], Optional[str]]] = None,
             lines: Iterable[int] = ()) -> str:
    """The class of one main-thread stack. `source_line(path, line)` may give the innermost frame's source line,
    which tells a blocking .item()/.cpu() that no frame names."""
    if any("importlib" in path and "_bootstrap" in path for _, path in frames) or \
            any(name in _STARTUP for name, _ in frames):
        return "other"      # a module being imported, the rendezvous (torch.distributed's own too): start-up, no step
    for name, path in frames:
        for kind, test in _FRAME_TESTS:
            if test(name, path):
                return kind
    if frames and source_line is not None:
        first_line = next(iter(lines), None)
        text = source_line(frames[0][1], first_line) if first_line else None
        if text and _SYNC_LINE.search(text):
            return "sync"
    return "other"


def _not_the_jobs(path: str) -> bool:
    """A frame of torch, of another installed package, or of Python's own library: not the job's code."""
    return any(part in path for part in ("/torch/", "site-packages/", "dist-packages/", "/lib/python3")) or \
        path.startswith("<")


def where(frames: Sequence[Frame], lines: Sequence[Optional[int]]) -> Tuple[Optional[str], Optional[str]]:
    """(the collective the stack is in, the job's own line it was called from): `all_reduce`, `train.py:95`. The
    collective is the torch.distributed function the job called (the outermost frame of distributed_c10d.py, else
    of torch/distributed/); None when the stack is in none. Two ranks waiting in collectives named or called from
    different places are in different collectives."""
    distributed = [i for i, (_, path) in enumerate(frames) if "torch/distributed/" in path]
    c10d = [i for i in distributed if path_end(frames[i][1]) == "distributed_c10d.py"]
    pick = (c10d or distributed or [None])[-1]
    collective = frames[pick][0] if pick is not None else None
    own = next((i for i, (_, path) in enumerate(frames) if not _not_the_jobs(path)), None)
    site = None
    if own is not None:
        line = lines[own] if own < len(lines) else None
        site = f"{path_end(frames[own][1])}:{line}" if line else path_end(frames[own][1])
    return collective, site


def path_end(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def signature(frames: Sequence[Frame], lines: Sequence[Optional[int]]) -> str:
    """A short fingerprint of the whole stack, lines included: a rank whose fingerprint does not change between
    samples is where it was (waiting, or stopped); CPU time cannot tell a rank that spins in NCCL from one that
    works."""
    import hashlib
    text = "|".join(f"{name}@{path}:{line}" for (name, path), line in zip(frames, list(lines) + [None] * len(frames)))
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=6).hexdigest()


# a class only a training step's stack has: the steady state starts at the first. A metric's .item() is one: a
# loop that spends its step there (sync-bound) may show no other class for many samples, and starting at its first
# forward frame instead dropped all but the last sample of a sync-bound job
STEP_CLASSES = ("dataloader", "compute_launch", "collective", "sync")


def steady(classes: List[str]) -> List[str]:
    """The samples from the job's first step frame on (a DataLoader, forward/backward or collective frame): the
    start-up before it (interpreter, `import torch`, building the model) is not what the user asked about."""
    first = next((i for i, c in enumerate(classes) if c in STEP_CLASSES), None)
    return classes[first:] if first is not None else classes


def shares(classes: List[str]) -> dict:
    """Each class's share of the samples, in percent (every class named, 0 where never seen)."""
    total = len(classes)
    return {c: round(100.0 * classes.count(c) / total, 1) if total else 0.0 for c in CLASSES}
