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
# a source line that blocks on the GPU although no Python frame names it (.item() is a C method)
_SYNC_LINE = re.compile(r"\.(item|cpu|tolist|numpy)\(\)|\.synchronize\(|cuda\.synchronize|torch\.cuda\.Event\(")


def classify(frames: Sequence[Frame], source_line: Optional[Callable[[str, int], Optional[str]]] = None,
             lines: Iterable[int] = ()) -> str:
    """The class of one main-thread stack. `source_line(path, line)` may give the innermost frame's source line,
    which tells a blocking .item()/.cpu() that no frame names."""
    if any("importlib" in path and "_bootstrap" in path for _, path in frames):
        return "other"      # a module being imported (torch.distributed's own __init__ too): start-up, no step
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


# a class only a training step's stack has: the steady state starts at the first
STEP_CLASSES = ("dataloader", "compute_launch", "collective")


def steady(classes: List[str]) -> List[str]:
    """The samples from the job's first step frame on (a DataLoader, forward/backward or collective frame): the
    start-up before it (interpreter, `import torch`, building the model) is not what the user asked about."""
    first = next((i for i, c in enumerate(classes) if c in STEP_CLASSES), None)
    return classes[first:] if first is not None else classes


def shares(classes: List[str]) -> dict:
    """Each class's share of the samples, in percent (every class named, 0 where never seen)."""
    total = len(classes)
    return {c: round(100.0 * classes.count(c) / total, 1) if total else 0.0 for c in CLASSES}
