"""Every finding id gpuprep reports, gathered from where each is made, above all of them (as gpud's list of all
components stands above a registry that knows none): the host rules and the fleet's drift (rules.ids), the
burn-in's rules (burnin.judge) and the fleet's history (burnin.peers), the launch plan's checks (plan.PLAN_IDS), the job rules (job.judge: diagnose,
watch), and a fleet's unchecked host. docs/checks.md documents exactly these (tests/test_docs.py)."""
from functools import lru_cache
from typing import FrozenSet


@lru_cache(maxsize=None)
def all_ids() -> FrozenSet[str]:
    from .burnin.judge import BURNIN_IDS
    from .burnin.peers import FLEET_IDS
    from .job.judge import JOB_IDS
    from .plan import PLAN_IDS
    from .rules.drift import UNCHECKED
    from .rules.ids import check_ids
    return check_ids() | {UNCHECKED[0]} | BURNIN_IDS | PLAN_IDS | JOB_IDS | FLEET_IDS
