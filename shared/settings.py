"""Settings shared by every service: Kafka, registry, metrics, catalog, logging.

Each service subclasses :class:`ServiceSettings` with its own env prefix, e.g.
``ICEFJORD_WRITER_KAFKA__BOOTSTRAP_SERVERS``. Settings are parsed once in ``__main__`` and
passed down; no other module reads the environment.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

CONTROL_TOPIC = "icefjord.control"
CONTROL_STATE_TOPIC = "icefjord.control-state"
DEAD_LETTER_TOPIC = "icefjord.deadletter"
QUARANTINE_TOPIC = "icefjord.quarantine"
CHANGES_TOPIC_PREFIX = "icefjord.changes."


class KafkaSettings(BaseModel):
    """How to reach Kafka; security settings pass straight through to librdkafka."""

    bootstrap_servers: str = "127.0.0.1:9092"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: SecretStr | None = None
    client_id: str = "icefjord"
    extra: dict[str, str] = Field(
        default_factory=dict, description="Further librdkafka properties, passed as they are."
    )

    def client_config(self) -> dict[str, Any]:
        """The librdkafka configuration shared by producers, consumers and admin clients."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
            "client.id": self.client_id,
        }
        optional: dict[str, str | SecretStr | None] = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": self.ssl_key_password,
        }
        for key, value in optional.items():
            if isinstance(value, SecretStr):
                config[key] = value.get_secret_value()
            elif value is not None:
                config[key] = value
        config.update(self.extra)
        return config


class RegistrySettings(BaseModel):
    """A Confluent-compatible Schema Registry (Apicurio's ``/apis/ccompat/v7`` or Confluent's)."""

    url: str = "http://127.0.0.1:8081/apis/ccompat/v7"
    basic_auth_user_info: SecretStr | None = Field(
        default=None, description="<user>:<password> for HTTP basic auth."
    )
    ssl_ca_location: str | None = Field(
        default=None,
        description="PEM file of the CA(s) an https registry's certificate is checked "
        "against; None: the system's.",
    )

    def client_config(self) -> dict[str, Any]:
        """Configuration for ``confluent_kafka.schema_registry.SchemaRegistryClient``."""
        config: dict[str, Any] = {"url": self.url}
        if self.basic_auth_user_info is not None:
            config["basic.auth.user.info"] = self.basic_auth_user_info.get_secret_value()
        if self.ssl_ca_location is not None:
            config["ssl.ca.location"] = self.ssl_ca_location
        return config

    def basic_auth(self) -> tuple[str, str] | None:
        """``(user, password)`` for HTTP clients other than confluent_kafka's; None without."""
        if self.basic_auth_user_info is None:
            return None
        user, _, password = self.basic_auth_user_info.get_secret_value().partition(":")
        return user, password

    def ssl_context(self) -> ssl.SSLContext:
        """What an HTTP client other than confluent_kafka's verifies the registry with: the
        CAs of ``ssl_ca_location``, else the system's."""
        return ssl.create_default_context(cafile=self.ssl_ca_location)


class MetricsSettings(BaseModel):
    """Where the service serves ``/metrics``, ``/healthz`` and ``/readyz``."""

    host: str = "0.0.0.0"
    port: int = 9400


class CatalogSettings(BaseModel):
    """Which Iceberg catalog to use.

    The catalog's own properties follow pyiceberg's convention
    (``PYICEBERG_CATALOG__<NAME>__URI`` and friends). When none are set, the local stack's
    JDBC catalog on SQLite under ``local_state_dir`` is used.
    """

    name: str = "icefjord"
    local_state_dir: Path = Path(".icefjord")


class ControlStateSettings(BaseModel):
    """Checkpoints of a service's fold of the control topic (``shared.control_state``)."""

    topic: str = Field(
        default=CONTROL_STATE_TOPIC, description="The compacted topic the checkpoints go to."
    )
    every: int = Field(
        default=20_000,
        ge=1,
        description="Save a checkpoint after this many control events; a start reads at "
        "most about this many events after the newest checkpoint.",
    )
    interval_s: float = Field(
        default=60.0,
        gt=0,
        description="Save a checkpoint at least this often while control events arrive.",
    )


class ServiceSettings(BaseSettings):
    """Fields common to every service's settings; subclasses set their own ``env_prefix``."""

    model_config = SettingsConfigDict(env_prefix="ICEFJORD_", env_nested_delimiter="__")

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    registry: RegistrySettings = Field(default_factory=RegistrySettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    control_topic: str = CONTROL_TOPIC
    log_level: str = "INFO"
    log_format: Literal["json", "console"] = "json"
    stuck_step_s: float = Field(
        default=0.0,
        ge=0,
        description="A loop step (a batch, a commit) running longer than this means a client "
        "call is not returning: the service logs where and exits with code 4 so that its "
        "supervisor restarts it (shared/loop.py). 0: never. Set it above the longest step "
        "the service may legitimately take (a MERGE into a large table, a rewrite).",
    )


def masked(settings: BaseModel) -> dict[str, Any]:
    """The settings as a dict for logging; ``SecretStr`` values print as ``**********``."""
    return settings.model_dump(mode="json")
