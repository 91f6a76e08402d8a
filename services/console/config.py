"""icefjord-console settings: the shared ones plus where to serve, what to read, and whether
the page may act.

Environment variables carry the prefix ``ICEFJORD_CONSOLE_``; nested fields use ``__``, e.g.
``ICEFJORD_CONSOLE_KAFKA__BOOTSTRAP_SERVERS``. Actions (pause, resume, flush, compact) are off
unless ``ICEFJORD_CONSOLE_ACTIONS=true``, and then need ``ICEFJORD_CONSOLE_TOKEN``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from shared.kafka import TopicRequest
from shared.settings import (
    CONTROL_TOPIC,
    DEAD_LETTER_TOPIC,
    QUARANTINE_TOPIC,
    MetricsSettings,
    ServiceSettings,
)
from shared.topics import catalog_topic_request

DEFAULT_WEB_PORT = 9405


class ConsoleWebSettings(MetricsSettings):
    """Where Faust's web server listens: the page, the API, ``/metrics``, ``/healthz``."""

    port: int = DEFAULT_WEB_PORT


class ConsoleSettings(ServiceSettings):
    """Everything icefjord-console reads from its environment, parsed once in ``__main__``."""

    model_config = SettingsConfigDict(env_prefix="ICEFJORD_CONSOLE_", env_nested_delimiter="__")

    metrics: ConsoleWebSettings = Field(default_factory=ConsoleWebSettings)
    app_id: str = Field(
        default="icefjord-console",
        description="Faust's app id: the consumer group and the prefix of its changelog topics.",
    )
    data_dir: Path = Field(
        default=Path(tempfile.gettempdir()) / "icefjord-console",
        description="Faust's data directory (it creates it; the tables themselves are in "
        "memory). Under /tmp by default: the images' root file system is read-only.",
    )
    dead_letter_topic: str = DEAD_LETTER_TOPIC
    quarantine_topic: str = QUARANTINE_TOPIC
    actions: bool = Field(
        default=False,
        description="Let the page and the API publish pause, resume, flush and compact. Off: "
        "the console only reads.",
    )
    token: SecretStr | None = Field(
        default=None,
        description="The bearer token every action must carry (Authorization: Bearer ...); "
        "required when actions are on.",
    )
    history: int = Field(
        default=20, ge=1, le=500, description="Commits and maintenance results kept per table."
    )
    behind_after_s: float = Field(
        default=300.0,
        gt=0,
        description="A table whose last commit's freshness (commit time less watermark) "
        "exceeds this is shown as behind.",
    )
    processing_guarantee: Literal["exactly_once", "at_least_once"] = Field(
        default="exactly_once",
        description="Faust's processing guarantee. exactly_once is how Faust reads with "
        "isolation.level=read_committed (a transactional control topic shows only committed "
        "events) and writes its changelogs in transactions.",
    )
    topic_replication_factor: int = Field(
        default=3,
        ge=1,
        description="Replication factor of Faust's changelog topics, and of the topics the "
        "console creates when missing. Set 1 for a single-broker stack.",
    )
    producer: str = Field(
        default="icefjord-console", description="The `producer` stamped on published events."
    )

    def topic_requests(self) -> list[TopicRequest]:
        """The control, dead-letter and quarantine topics as the contracts' catalog declares
        them, with the replication factor (``topic_replication_factor``) overridden."""
        return [
            catalog_topic_request(name, entry, replication_factor=self.topic_replication_factor)
            for name, entry in (
                (self.control_topic, CONTROL_TOPIC),
                (self.dead_letter_topic, DEAD_LETTER_TOPIC),
                (self.quarantine_topic, QUARANTINE_TOPIC),
            )
        ]

    @model_validator(mode="after")
    def _token_when_acting(self) -> ConsoleSettings:
        if self.actions and (self.token is None or not self.token.get_secret_value()):
            raise ValueError("actions are on but no token is set (ICEFJORD_CONSOLE_TOKEN)")
        return self
