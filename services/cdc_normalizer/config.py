"""cdc-normalizer settings: the shared ones plus which topics to read and how to write.

Environment variables carry the prefix ``ICEFJORD_NORMALIZER_``; nested fields use ``__``, e.g.
``ICEFJORD_NORMALIZER_KAFKA__BOOTSTRAP_SERVERS`` or ``ICEFJORD_NORMALIZER_INCLUDE_PATTERN``.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from shared.kafka import TopicRequest
from shared.settings import DEAD_LETTER_TOPIC, MetricsSettings, ServiceSettings
from shared.topics import catalog_topic_request

DEFAULT_METRICS_PORT = 9401
DEFAULT_INCLUDE = r"^[^.]+\.[^.]+\.[^.]+$"
DEFAULT_EXCLUDE = (
    r"^(__|icefjord\.)",  # internal topics and our own output
    r"heartbeat",  # Debezium heartbeat topics (__debezium-heartbeat.<server>)
    r"schema-?(history|changes)",  # schema-history and schema-change topics
    r"\.transaction$",  # transaction metadata topics (<server>.transaction)
)


class NormalizerMetricsSettings(MetricsSettings):
    """The shared metrics endpoint settings with cdc-normalizer's own default port."""

    port: int = DEFAULT_METRICS_PORT


class NormalizerSettings(ServiceSettings):
    """Everything cdc-normalizer reads from its environment, parsed once in ``__main__``."""

    model_config = SettingsConfigDict(env_prefix="ICEFJORD_NORMALIZER_", env_nested_delimiter="__")

    metrics: NormalizerMetricsSettings = Field(default_factory=NormalizerMetricsSettings)
    include_pattern: str = Field(
        default=DEFAULT_INCLUDE,
        description="Regex of the Debezium topics to read; the consumer subscribes by it, so "
        "new topics are picked up. Must start with '^' (librdkafka's pattern marker).",
    )
    exclude_patterns: tuple[str, ...] = Field(
        default=DEFAULT_EXCLUDE,
        description="Regexes (re.search); a matching topic is skipped even if included.",
    )
    group_id: str = "icefjord-cdc-normalizer"
    # On here alone: the only transactional producer, whose calls librdkafka can wedge
    # (shared/loop.py). A batch takes seconds; its slowest legitimate wait is a commit
    # retried while the broker is down, which a restart waits out as well.
    stuck_step_s: float = Field(
        default=120.0, ge=0, description=ServiceSettings.model_fields["stuck_step_s"].description
    )
    transactional_id: str | None = Field(
        default=None,
        description="The producer's transactional.id; None gives '<group_id>-<hostname>'. "
        "Must be unique per running instance and stable across its restarts.",
    )
    # 2,000, not 500: under a backlog a quarter of the transactions (each one commits
    # offsets and writes markers to every partition it touched), so the broker spends less
    # CPU per change (measured: docs/benchmarks/HISTORY.md, "Figures moved out of code
    # comments"). Below 2,000 changes/s a batch holds what is already fetched, so it stays
    # small and adds no wait.
    batch_size: int = Field(default=2000, ge=1, description="Records per transaction at most.")
    poll_timeout_s: float = Field(default=1.0, gt=0)
    transaction_timeout_ms: int = Field(default=60_000, ge=1000)
    max_record_bytes: int = Field(
        default=900_000,
        ge=1,
        description="A consumed record whose key + value exceed this is dead-lettered.",
    )
    dead_letter_topic: str = DEAD_LETTER_TOPIC
    output_partitions: int = Field(
        default=3, ge=1, description="Partitions of a new changes topic."
    )
    topic_replication_factor: int | None = Field(
        default=None,
        ge=1,
        description="Replication factor of topics we create; None keeps the catalog's (3). "
        "Set 1 for a single-broker stack.",
    )
    metadata_refresh_ms: int = Field(
        default=1000,
        ge=100,
        description="How often topics matching include_pattern are discovered (librdkafka's "
        "default is 5 minutes, so a table created mid-run would wait that long). Every "
        "refresh is one metadata request for all topics: raise it on clusters of many "
        "thousands of topics.",
    )
    set_compatibility: str | None = Field(
        default="BACKWARD",
        description="Compatibility set once per new value subject; None leaves the registry's.",
    )

    @field_validator("include_pattern")
    @classmethod
    def _include_compiles(cls, value: str) -> str:
        if not value.startswith("^"):
            raise ValueError("include_pattern must start with '^' to subscribe by pattern")
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"include_pattern is not a regular expression: {exc}") from exc
        return value

    @field_validator("exclude_patterns")
    @classmethod
    def _exclude_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"exclude pattern {pattern!r}: {exc}") from exc
        return value

    def wants_topic(self, topic: str) -> bool:
        """True for a topic matching the include pattern and no exclude pattern."""
        if re.search(self.include_pattern, topic) is None:
            return False
        return not any(re.search(pattern, topic) for pattern in self.exclude_patterns)

    def topic_filter(self) -> TopicFilter:
        """:meth:`wants_topic` as the per-record path uses it: decided once per topic."""
        return TopicFilter(self.wants_topic)

    def effective_transactional_id(self) -> str:
        """:attr:`transactional_id`, or ``<group_id>-<hostname>``."""
        return self.transactional_id or f"{self.group_id}-{socket.gethostname()}"

    def _request(self, name: str, catalog_name: str, partitions: int | None) -> TopicRequest:
        return catalog_topic_request(
            name,
            catalog_name,
            partitions=partitions,
            replication_factor=self.topic_replication_factor,
        )

    def dead_letter_request(self) -> TopicRequest:
        """The dead-letter topic as the topic catalog specifies it."""
        return self._request(self.dead_letter_topic, DEAD_LETTER_TOPIC, None)

    def changes_request(self, topic: str) -> TopicRequest:
        """A changes topic: catalog settings, :attr:`output_partitions` partitions."""
        return self._request(topic, "icefjord.changes.<namespace>.<table>", self.output_partitions)


class TopicFilter:
    """``decide(topic)`` remembered per topic name (``decide``: the settings' ``wants_topic``).

    Every consumed record asks; with the patterns searched each time that was 5% of the
    service's CPU. Topics are few, so the memo is small; it is cleared if it ever reaches
    :attr:`SIZE` names.
    """

    SIZE = 4096

    def __init__(self, decide: Callable[[str], bool]) -> None:
        self._decide = decide
        self._decided: dict[str, bool] = {}

    def __call__(self, topic: str) -> bool:
        decided = self._decided.get(topic)
        if decided is None:
            decided = self._decide(topic)
            if len(self._decided) >= self.SIZE:
                self._decided.clear()
            self._decided[topic] = decided
        return decided
