"""schema-watcher settings: the shared ones plus what to watch and how often.

Environment variables carry the prefix ``ICEFJORD_WATCHER_``; nested fields use ``__``, e.g.
``ICEFJORD_WATCHER_REGISTRY__URL`` or ``ICEFJORD_WATCHER_KAFKA__BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from shared.kafka import TopicRequest
from shared.settings import (
    CONTROL_STATE_TOPIC,
    CONTROL_TOPIC,
    ControlStateSettings,
    MetricsSettings,
    ServiceSettings,
)
from shared.topics import catalog_topic_request

DEFAULT_SUBJECT_PATTERN = r"^icefjord\.changes\..+-value$"
DEFAULT_METRICS_PORT = 9402


class WatcherMetricsSettings(MetricsSettings):
    """The shared metrics endpoint settings with schema-watcher's own default port."""

    port: int = DEFAULT_METRICS_PORT


class WatcherSettings(ServiceSettings):
    """Everything schema-watcher reads from its environment, parsed once in ``__main__``."""

    model_config = SettingsConfigDict(env_prefix="ICEFJORD_WATCHER_", env_nested_delimiter="__")

    metrics: WatcherMetricsSettings = Field(default_factory=WatcherMetricsSettings)
    control_state: ControlStateSettings = Field(default_factory=ControlStateSettings)
    subject_pattern: str = Field(
        default=DEFAULT_SUBJECT_PATTERN,
        description="Regular expression (re.search) selecting the registry subjects to watch.",
    )
    poll_interval_s: float = Field(
        default=2.0, gt=0, description="Pause between two registry polls, in seconds."
    )
    probe_interval_s: float = Field(
        default=0.5,
        ge=0,
        description="How often Apicurio Registry is asked for its newest version's global id "
        "(one small request); a new answer starts a full poll at once (probe.py). 0, or a "
        "registry other than Apicurio: poll every poll_interval_s only.",
    )
    producer: str = Field(
        default="schema-watcher", description="The `producer` stamped on published events."
    )
    recovery_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="How long reading the control topic back at start may take before retrying.",
    )
    create_control_topic: bool = Field(
        default=True, description="Create the control topic at start when it is missing."
    )
    topic_replication_factor: int | None = Field(
        default=None,
        ge=1,
        description="Replication factor for a created control topic; None keeps the catalog's "
        "(3). Set 1 for a single-broker stack.",
    )

    @field_validator("subject_pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"subject_pattern is not a regular expression: {exc}") from exc
        return value

    @property
    def subject_regex(self) -> re.Pattern[str]:
        """The compiled :attr:`subject_pattern`."""
        return re.compile(self.subject_pattern)

    def control_topic_request(self) -> TopicRequest:
        """The control topic as the contracts' topic catalog specifies it, with the
        replication factor (and ``min.insync.replicas``, never above it) overridable."""
        return catalog_topic_request(
            self.control_topic, CONTROL_TOPIC, replication_factor=self.topic_replication_factor
        )

    def control_state_topic_request(self) -> TopicRequest:
        """The control-state topic (checkpoints) as the topic catalog specifies it."""
        return catalog_topic_request(
            self.control_state.topic,
            CONTROL_STATE_TOPIC,
            replication_factor=self.topic_replication_factor,
        )
