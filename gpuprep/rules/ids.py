"""The ids `gpuprep check` can report about a host or a fleet: the host rules register theirs (`@rule(ids...)`), the
fleet's drift facts are a table (drift.FACTS). --skip and --only accept these and their areas. Every id of every
command (burn-in, plan, job) is gathered above the rules, in gpuprep/checks.py."""
from functools import lru_cache
from typing import FrozenSet


@lru_cache(maxsize=None)
def check_ids() -> FrozenSet[str]:
    """The ids `gpuprep check` can report about a host or a fleet, which --skip/--only may name."""
    from . import RULES, _load_areas
    from .drift import DRIFT_IDS
    from .peers import PEER_IDS
    _load_areas()
    return frozenset(i for fn in RULES for i in fn.ids) | DRIFT_IDS | PEER_IDS


@lru_cache(maxsize=None)
def areas() -> FrozenSet[str]:
    return frozenset(i.split(".", 1)[0] for i in check_ids())
