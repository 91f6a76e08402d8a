"""maintainer settings: the shared ones plus the catalog, Spark, the policies and the planner.

Environment variables carry the prefix ``ICEFJORD_MAINTAINER_``; nested fields use ``__``,
e.g. ``ICEFJORD_MAINTAINER_POLICY__COMPACT_MIN_SMALL_FILES=50`` or
``ICEFJORD_MAINTAINER_PLANNER__MAX_BUSY_FRACTION=0.3``. Per-table policy overrides are a
JSON object: ``ICEFJORD_MAINTAINER_TABLES='{"shop.orders": {"expire_max_snapshots": 2000}}'``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from pydantic import BaseModel, Field, TypeAdapter, ValidationError, field_validator
from pydantic_settings import SettingsConfigDict

from services.maintainer.catchup import CatchUpRule
from services.maintainer.identifiers import MalformedIdentifierError, parse_table
from services.maintainer.planner import PlannerLimits
from services.maintainer.policy import MaintenancePolicy
from shared.kafka import TopicRequest
from shared.settings import CONTROL_TOPIC, CatalogSettings, MetricsSettings, ServiceSettings
from shared.spark import SparkSettings
from shared.topics import catalog_topic_request

DEFAULT_METRICS_PORT = 9404
PRODUCER = "maintainer"

_POLICY = TypeAdapter(MaintenancePolicy)


class MaintainerMetricsSettings(MetricsSettings):
    """The shared metrics endpoint settings with the maintainer's own default port."""

    port: int = DEFAULT_METRICS_PORT


class MaintainerSparkSettings(SparkSettings):
    """Spark for maintenance: two cores by default, so the writer keeps the rest."""

    master: str = "local[2]"


class PlannerSettings(BaseModel):
    """How much maintenance may run (see ``planner.py``)."""

    max_running: int = Field(default=1, ge=1)
    min_interval_s: float = Field(default=60.0, ge=0)
    window_s: float = Field(default=3600.0, gt=0)
    max_actions_per_window: int = Field(default=120, ge=1)
    max_busy_fraction: float = Field(default=0.5, gt=0, le=1)

    def limits(self) -> PlannerLimits:
        return PlannerLimits(**self.model_dump())


class MaintainerSettings(ServiceSettings):
    """Everything the maintainer reads from its environment, parsed once in ``__main__``."""

    model_config = SettingsConfigDict(env_prefix="ICEFJORD_MAINTAINER_", env_nested_delimiter="__")

    metrics: MaintainerMetricsSettings = Field(default_factory=MaintainerMetricsSettings)
    catalog: CatalogSettings = Field(default_factory=CatalogSettings)
    spark: MaintainerSparkSettings = Field(default_factory=MaintainerSparkSettings)
    policy: MaintenancePolicy = Field(
        default_factory=MaintenancePolicy, description="Default policy for every table."
    )
    tables: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-table policy overrides: {table: {policy field: value}}.",
    )
    planner: PlannerSettings = Field(default_factory=PlannerSettings)
    include: str = Field(
        default=r".*",
        description="Regular expression (fullmatch) of the <namespace>.<table> names to "
        "maintain; other tables are neither inspected nor touched by the policies.",
    )
    producer: str = Field(default=PRODUCER, description="The `producer` of published events.")
    group_id: str = Field(
        default="icefjord-maintainer", description="Consumer group on the control topic."
    )
    inspect_interval_s: float = Field(
        default=300.0, gt=0, description="Inspect every table at least this often."
    )
    inspect_min_interval_s: float = Field(
        default=15.0, ge=0, description="Inspect one table at most this often."
    )
    inspect_after_commits: int = Field(
        default=20, ge=1, description="Re-inspect a table after this many CommitDone events."
    )
    max_attempts: int = Field(
        default=3, ge=1, description="Runs of one action when Iceberg reports conflicts."
    )
    retry_delay_s: float = Field(default=2.0, ge=0, description="First pause between runs.")
    compaction_lease_s: float = Field(
        default=30.0,
        ge=0,
        description="Longest time the writer holds back a table's commits while it is being "
        "rewritten (shared/lease.py); 0: no lease, rewrites race the writer and retry.",
    )
    compaction_lease_settle_s: float = Field(
        default=0.0,
        ge=0,
        description="Once it holds the lease, wait at most this long for a writer commit "
        "already in flight to land before rewriting (less when the writer's recent commits "
        "were quicker); 0: start at once, and a rewrite that loses to such a commit runs "
        "again at once (with the priority boost a rewrite is usually shorter than this wait "
        "was when nothing was in flight; figures in docs/benchmarks/HISTORY.md).",
    )
    compaction_lease_nice: int = Field(
        default=-10,
        ge=-20,
        le=19,
        description="CPU nice value of the maintainer and its Spark JVM while it holds a "
        "compaction lease, so the rewrite the writer waits for is not starved on a shared "
        "machine (services/maintainer/priority.py); needs CAP_SYS_NICE or RLIMIT_NICE, else "
        "it is skipped. 0 (not below the process's own nice): off.",
    )
    catch_up: CatchUpRule = Field(
        default_factory=CatchUpRule,
        description="When rewrites wait for the writer to catch up (services/maintainer/"
        "catchup.py); off by default (lag_s 0).",
    )
    orphan_floor_s: float = Field(
        default=3600.0,
        ge=0,
        description="Never delete orphan files younger than this, whatever a request says.",
    )
    orphan_initial_delay_s: float = Field(
        default=3600.0, ge=0, description="First orphan cleanup this long after start."
    )
    request_max_age_s: float = Field(
        default=3600.0,
        gt=0,
        description="Operator requests older than this (e.g. read back after a group reset) "
        "are skipped, not executed.",
    )
    poll_timeout_s: float = Field(default=1.0, gt=0)
    max_poll_interval_ms: int = Field(
        default=1_800_000,
        ge=60_000,
        description="Kafka max.poll.interval.ms: longer than the longest maintenance action.",
    )
    warm_up: bool = Field(
        default=True,
        description="Run each maintenance procedure once on a throwaway table before the "
        "first action, outside its lease, so the first real compaction (which holds the "
        "table's lease) does not pay for the JVM's first compilation of the rewrite path.",
    )
    warm_up_at_start: bool = Field(
        default=False,
        description="Start Spark and its warm-up (``warm_up``) in the background as the "
        "service starts, instead of just before the first action: for a maintainer that "
        "will act soon and should not pay its JVM's start when a compaction is due. Off, a "
        "maintainer that never acts never starts a JVM. ``icefjord_maintainer_spark_ready`` "
        "turns 1 once it is done.",
    )
    create_control_topic: bool = True
    topic_replication_factor: int | None = Field(default=None, ge=1)

    @field_validator("include")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"include is not a regular expression: {exc}") from exc
        return value

    def maintains(self, table: str) -> bool:
        """Whether ``table`` matches :attr:`include`."""
        return re.fullmatch(self.include, table) is not None

    @field_validator("tables")
    @classmethod
    def _valid_overrides(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for table, overrides in value.items():
            try:
                parse_table(table)
            except MalformedIdentifierError as exc:
                raise ValueError(str(exc)) from exc
            unknown = set(overrides) - {f.name for f in dataclasses.fields(MaintenancePolicy)}
            if unknown:
                raise ValueError(f"{table}: unknown policy fields {sorted(unknown)}")
            try:
                _POLICY.validate_python(overrides)
            except ValidationError as exc:
                problems = "; ".join(str(e["msg"]) for e in exc.errors())
                raise ValueError(f"{table}: {problems}") from None
        return value

    def policy_for(self, table: str) -> MaintenancePolicy:
        """The default policy with ``table``'s overrides applied (values validated)."""
        overrides = self.tables.get(table)
        if not overrides:
            return self.policy
        return _POLICY.validate_python({**dataclasses.asdict(self.policy), **overrides})

    def control_topic_request(self) -> TopicRequest:
        """The control topic as the contracts' topic catalog specifies it."""
        return catalog_topic_request(
            self.control_topic, CONTROL_TOPIC, replication_factor=self.topic_replication_factor
        )
