"""Settings of the local stack (env prefix ``ICEFJORD_LOCAL_``): ports, directories, versions."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_cache() -> Path:
    return Path.home() / ".cache" / "icefjord"


class LocalSettings(BaseSettings):
    """Where the local stack keeps its state and downloads, and which ports it uses."""

    model_config = SettingsConfigDict(env_prefix="ICEFJORD_LOCAL_")

    state_dir: Path = Field(
        default=Path(".icefjord"), description="Topics, schemas, catalog and warehouse."
    )
    cache_dir: Path = Field(
        default_factory=_default_cache, description="Maven downloads, reused across runs."
    )
    host: str = "127.0.0.1"
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    registry_port: int = 8081
    kafka_version: str = "3.9.1"
    apicurio_version: str = "3.0.9"
    iceberg_version: str = "1.12.0"
    kafka_heap: str = "512m"
    registry_heap: str = "512m"
    start_timeout_s: float = 120.0
    catalog_name: str = "icefjord"
    # The demo's CDC source (icefjord.local.postgres / .connect); unused by `local up`.
    postgres_port: int = Field(default=5433, description="5433: clear of a system 5432.")
    postgres_dir: Path | None = Field(
        default=None, description="The demo cluster's home; None is <state_dir>/postgres."
    )
    postgres_bin_dir: Path | None = Field(
        default=None, description="initdb/pg_ctl location; None searches PostgreSQL installs."
    )
    postgres_os_user: str = Field(
        default="postgres",
        description="Unprivileged account PostgreSQL runs as when started by root.",
    )
    postgres_database: str = "icefjord"
    postgres_user: str = "icefjord"
    connect_port: int = 8083
    # Debezium's queue holds up to 32,768 records under load (connect.py), and they outlive
    # young collections. With 512m the old generation filled within minutes: ten full
    # collections in the first 12 minutes of two benchmarks, and Kafka Connect's collector
    # threads used 5.1 CPU s in a 10,000/s phase that took 2.1 s with 1g.
    connect_heap: str = "1g"
    debezium_version: str = "3.2.3.Final"
    normalizer_port: int = 9401
    compiled_services: bool = Field(
        default=True,
        description="Run the normalizer and the writer from <state_dir>/compiled (make "
        "compiled) while that build matches the sources; false: always plain CPython.",
    )
    watcher_port: int = 9402
    writer_port: int = 9403
    maintainer_port: int = 9404

    @property
    def dist_dir(self) -> Path:
        return self.cache_dir.expanduser().resolve() / "dist"

    @property
    def maven_repo(self) -> Path:
        return self.cache_dir.expanduser().resolve() / "m2"

    @property
    def state(self) -> Path:
        return self.state_dir.expanduser().resolve()

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def registry_url(self) -> str:
        return f"http://{self.host}:{self.registry_port}/apis/ccompat/v7"

    @property
    def postgres_home(self) -> Path:
        return (self.postgres_dir or self.state / "postgres").expanduser().resolve()

    @property
    def connect_url(self) -> str:
        return f"http://{self.host}:{self.connect_port}"

    @property
    def catalog_db(self) -> Path:
        return self.state / "catalog" / "catalog.db"

    @property
    def warehouse(self) -> Path:
        return self.state / "warehouse"
