"""iceberg-writer settings: the shared ones plus Spark, the catalog, batching and table layout.

Environment variables carry the prefix ``ICEFJORD_WRITER_``; nested fields use ``__``, e.g.
``ICEFJORD_WRITER_KAFKA__BOOTSTRAP_SERVERS``, ``ICEFJORD_WRITER_SPARK__MASTER`` or, as JSON,
``ICEFJORD_WRITER_TABLES='{"shop.orders": {"partition_by": ["days(created_at)"]}}'``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from services.iceberg_writer.tables import TableConfig, partition_sql
from services.iceberg_writer.types import MetadataColumns
from shared.kafka import TopicRequest
from shared.settings import (
    CONTROL_STATE_TOPIC,
    CONTROL_TOPIC,
    DEAD_LETTER_TOPIC,
    QUARANTINE_TOPIC,
    CatalogSettings,
    ControlStateSettings,
    MetricsSettings,
    ServiceSettings,
)
from shared.spark import SparkSettings
from shared.topics import catalog_topic_request

DEFAULT_METRICS_PORT = 9403
DEFAULT_TOPIC_PATTERN = r"^icefjord\.changes\.[^.]+\.[^.]+$"


class WriterMetricsSettings(MetricsSettings):
    """The shared metrics endpoint settings with iceberg-writer's own default port."""

    port: int = DEFAULT_METRICS_PORT


class TableSettings(BaseModel):
    """Layout of one table, applied when the writer creates it."""

    partition_by: tuple[str, ...] = Field(
        default=(),
        description="Iceberg partition transforms, e.g. days(created_at), bucket(16, id).",
    )
    properties: dict[str, str] = Field(default_factory=dict, description="Extra table properties.")
    freshness_target_s: float | None = Field(
        default=None, gt=0, description="This table's p99 freshness target; None: the default."
    )

    @field_validator("partition_by")
    @classmethod
    def _valid(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for expression in value:
            partition_sql(expression)
        return value

    def table_config(self) -> TableConfig:
        return TableConfig(self.partition_by, self.properties)


class MetadataColumnSettings(BaseModel):
    """Names of the per-row change columns; an empty name turns op or source_ts off."""

    op: str = "_icefjord_op"
    position: str = Field(default="_icefjord_position", min_length=1)
    source_ts: str = "_icefjord_source_ts"

    @model_validator(mode="after")
    def _plain_and_distinct(self) -> MetadataColumnSettings:
        names = [name for name in (self.op, self.position, self.source_ts) if name]
        for name in names:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
                raise ValueError(f"metadata column name {name!r} is not a plain identifier")
        if len(set(names)) != len(names):
            raise ValueError(f"metadata column names must be distinct, got {names}")
        return self

    def columns(self) -> MetadataColumns:
        return MetadataColumns(self.op or None, self.position, self.source_ts or None)


class WriterSparkSettings(SparkSettings):
    """Spark for the writer's commits: one shuffle partition by default.

    A MERGE shuffles the table's keys and the batch; with batches of a second or so of
    changes, every extra partition is only another task and shuffle file per stage. One
    partition cut a 1,000-change MERGE into a 100,000-row table from 1.06 to 0.88 CPU
    seconds, and a 40,000-change one was no slower. With executors on Kubernetes, raise it
    to their cores (the spark-on-kubernetes component sets 8).
    """

    shuffle_partitions: int = Field(default=1, ge=1)


class WriterSettings(ServiceSettings):
    """Everything iceberg-writer reads from its environment, parsed once in ``__main__``."""

    model_config = SettingsConfigDict(env_prefix="ICEFJORD_WRITER_", env_nested_delimiter="__")

    metrics: WriterMetricsSettings = Field(default_factory=WriterMetricsSettings)
    spark: WriterSparkSettings = Field(default_factory=WriterSparkSettings)
    catalog: CatalogSettings = Field(default_factory=CatalogSettings)
    control_state: ControlStateSettings = Field(default_factory=ControlStateSettings)
    topic_pattern: str = Field(
        default=DEFAULT_TOPIC_PATTERN,
        description="Regex of the change topics to write (must start with ^).",
    )
    group_id: str = Field(default="icefjord-writer", description="Kafka consumer group.")
    producer: str = Field(default="iceberg-writer", description="`producer` on published events.")
    epoch: int | None = Field(
        default=None, ge=1, description="Writer epoch; None: the start time in ms (newer wins)."
    )
    freshness_target_s: float = Field(
        default=5.0, gt=0, description="Default p99 target from source commit to visible."
    )
    min_batch_s: float = Field(default=0.2, ge=0, description="Shortest wait before a commit.")
    max_batch_records: int = Field(
        default=200_000, ge=1, description="A batch closes at this size."
    )
    schema_wait_s: float = Field(
        default=300.0,
        gt=0,
        description="How long rows of an unannounced schema version wait "
        "for its SchemaChange before they are quarantined.",
    )
    commit_retries: int = Field(default=5, ge=0, description="Retries of a conflicting commit.")
    commit_parallelism: int = Field(
        default=2,
        ge=1,
        description="Tables committed at the same time. Much of a MERGE is driver-side "
        "planning and catalog round trips, so two tables' commits overlap well even on 2 cores.",
    )
    tables: dict[str, TableSettings] = Field(default_factory=dict)
    metadata_columns: MetadataColumnSettings = Field(default_factory=MetadataColumnSettings)
    staging_dir: str | None = Field(default=None, description="Where batches are staged.")
    dead_letter_topic: str = DEAD_LETTER_TOPIC
    quarantine_topic: str = QUARANTINE_TOPIC
    create_topics: bool = Field(default=True, description="Create the writer's topics if missing.")
    topic_replication_factor: int | None = Field(default=None, ge=1)
    warm_up: bool = Field(
        default=True,
        description="Run each write path once on a throwaway table at start, in the "
        "background while the loop already runs, and report ready once done, so later "
        "commits are not 20-30 s slower the first time each path runs.",
    )
    insert_path: bool = Field(
        default=False,
        description="Batches of snapshot reads no newer than any stored row write only the "
        "keys the table lacks (an anti-join), instead of a MERGE. Off: it did not shorten "
        "the end-to-end benchmark's snapshot (service README, 'Insert path').",
    )
    upsert_path: bool = Field(
        default=True,
        description="A batch whose every change is at least as new as the stored row of its "
        "key goes in as equality deletes of its keys plus a data file of its rows, without "
        "the MERGE's join (unpartitioned local tables; service README, 'Upsert path').",
    )
    metadata_refresh_ms: int = Field(
        default=1000,
        ge=100,
        description="How often new change topics are discovered: a new table's first "
        "changes wait up to this long, twice (normalizer and writer).",
    )

    @field_validator("topic_pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        if not value.startswith("^"):
            raise ValueError("topic_pattern must start with '^' to subscribe by pattern")
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"topic_pattern is not a regular expression: {exc}") from exc
        return value

    def freshness_target(self, table: str) -> float:
        configured = self.tables.get(table)
        if configured is not None and configured.freshness_target_s is not None:
            return configured.freshness_target_s
        return self.freshness_target_s

    def topic_requests(self) -> list[TopicRequest]:
        rf = self.topic_replication_factor
        return [
            catalog_topic_request(self.control_topic, CONTROL_TOPIC, replication_factor=rf),
            catalog_topic_request(
                self.control_state.topic, CONTROL_STATE_TOPIC, replication_factor=rf
            ),
            catalog_topic_request(self.dead_letter_topic, DEAD_LETTER_TOPIC, replication_factor=rf),
            catalog_topic_request(self.quarantine_topic, QUARANTINE_TOPIC, replication_factor=rf),
        ]
