"""The API's arguments checked at its entry, before anything starts: a wrong type is BadInput naming the argument
(`BadInput.argument`), never a string split into letters, a file descriptor read from, or a run begun first."""
from __future__ import annotations

import math
from typing import Any, Collection, List, Optional

from .errors import bad_argument


def _shown(value: Any) -> str:
    return repr(value)[:40]


def texts(argument: str, value: Any) -> List[str]:
    """A list (or tuple) of strings: one string is refused, since iterating it gives its letters."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or \
            not all(isinstance(item, str) for item in value):
        raise bad_argument(argument, f"must be a list of strings, not {_shown(value)}")
    return list(value)


def text(argument: str, value: Any, optional: bool = True) -> Optional[str]:
    if (value is None and optional) or isinstance(value, str):
        return value
    raise bad_argument(argument, f"must be a string, not {_shown(value)}")


def flag(argument: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise bad_argument(argument, f"must be True or False, not {_shown(value)}")
    return value


def whole(argument: str, value: Any, minimum: int = 0, maximum: Optional[int] = None,
          optional: bool = False) -> Optional[int]:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or \
            (maximum is not None and value > maximum):
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
        raise bad_argument(argument, f"must be a whole number {bounds}, not {_shown(value)}")
    return value


def seconds(argument: str, value: Any, optional: bool = False) -> Optional[float]:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise bad_argument(argument, f"must be a finite number of seconds above 0, not {_shown(value)}")
    return float(value)


def choice(argument: str, value: Any, choices: Collection[str]) -> str:
    if value not in choices:
        raise bad_argument(argument, f"must be one of {', '.join(choices)}, not {_shown(value)}")
    return value


def mapping(argument: str, value: Any) -> Optional[dict]:
    if value is None or (isinstance(value, dict) and all(isinstance(k, str) for k in value)):
        return value
    raise bad_argument(argument, f"must be a dict with string keys, not {_shown(value)}")


def snapshot(argument: str, value: Any):
    """None or a Snapshot (api.snapshot()): the facts of one host."""
    if value is None:
        return None
    from .snapshot import Snapshot
    if not isinstance(value, Snapshot):
        raise bad_argument(argument, "must be a Snapshot (api.snapshot())")
    return value
