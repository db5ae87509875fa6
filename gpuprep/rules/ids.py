"""Every finding id gpuprep reports, gathered from where each is made: the host rules register theirs
(`@rule(ids...)`), the fleet's drift facts are a table (drift.FACTS), the burn-in's rules register theirs
(burnin.judge), the job rules register theirs (job.judge: diagnose, watch), and the launch plan's checks are listed beside them (plan.PLAN_IDS). docs/checks.md documents
exactly these (tests/test_docs.py). --skip and --only accept the host and drift ids and their areas."""
from functools import lru_cache
from typing import FrozenSet


@lru_cache(maxsize=None)
def check_ids() -> FrozenSet[str]:
    """The ids `gpuprep check` can report about a host or a fleet, which --skip/--only may name."""
    from . import RULES, _load_areas
    from .drift import DRIFT_IDS
    _load_areas()
    return frozenset(i for fn in RULES for i in fn.ids) | DRIFT_IDS


@lru_cache(maxsize=None)
def areas() -> FrozenSet[str]:
    return frozenset(i.split(".", 1)[0] for i in check_ids())


@lru_cache(maxsize=None)
def all_ids() -> FrozenSet[str]:
    """check_ids() and the findings no filter may waive or that other commands report: a fleet's unchecked host,
    the burn-in's and the plan's."""
    from ..burnin.judge import BURNIN_IDS
    from ..job.judge import JOB_IDS
    from ..plan import PLAN_IDS
    from .drift import UNCHECKED
    return check_ids() | {UNCHECKED[0]} | BURNIN_IDS | PLAN_IDS | JOB_IDS
