"""maintainer: keeps every Iceberg table healthy, with each action a control event.

The pure core: :func:`compute_health` / :func:`apply_commit` build the health model,
:func:`evaluate` applies the policies, :func:`plan` orders and rate-limits, and
:func:`validate_request` checks a request before any SQL is rendered. The shell
(``execute.py``, ``service.py``, ``inspect.py``) talks to Spark, the catalog and Kafka.
"""

from services.maintainer.health import TableHealth, TableInspection, apply_commit, compute_health
from services.maintainer.planner import PlannerLimits, PlannerState, plan
from services.maintainer.policy import Candidate, MaintenancePolicy, evaluate, expire_plan
from services.maintainer.requests import Rejection, ValidatedRequest, validate_request

__all__ = [
    "Candidate",
    "MaintenancePolicy",
    "PlannerLimits",
    "PlannerState",
    "Rejection",
    "TableHealth",
    "TableInspection",
    "ValidatedRequest",
    "apply_commit",
    "compute_health",
    "evaluate",
    "expire_plan",
    "plan",
    "validate_request",
]
