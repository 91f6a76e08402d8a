"""Settings of the local stack (env prefix ``ICEFJORD_LOCAL_``): ports, directories, versions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from icefjord.local.security import SecurityFiles, jaas_plain
from shared.settings import KafkaSettings, RegistrySettings


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
    # sasl_ssl: Kafka's client listener is SASL_SSL (PLAIN) and the registry serves HTTPS
    # with basic auth, with a CA, certificate and passwords of this state directory
    # (icefjord/local/security.py, docs/security.md).
    security: Literal["none", "sasl_ssl"] = Field(
        default="none", description="none: plaintext Kafka and HTTP registry; sasl_ssl."
    )
    kafka_user: str = "icefjord"
    registry_user: str = "icefjord"
    catalog_name: str = "icefjord"
    # Where tables live and which catalog lists them. The defaults start in seconds with
    # nothing to build; `s3` builds SeaweedFS once (about 10 CPU minutes, cached) and runs
    # it as the stack's S3 server; `postgres` keeps the catalog in the stack's PostgreSQL.
    warehouse_store: Literal["file", "s3"] = Field(
        default="file", description="file: <state_dir>/warehouse; s3: the local S3 server."
    )
    catalog_store: Literal["sqlite", "postgres"] = Field(
        default="sqlite", description="The JDBC catalog's database."
    )
    s3_port: int = 8333
    s3_master_port: int = 9333
    s3_volume_port: int = 9340
    s3_filer_port: int = 8888
    # SeaweedFS's gRPC ports (its own default is each HTTP port + 10000).
    s3_grpc_port: int = 18333
    s3_master_grpc_port: int = 19333
    s3_volume_grpc_port: int = 19340
    s3_filer_grpc_port: int = 18888
    s3_bucket: str = "icefjord"
    s3_access_key: str = "icefjord"
    s3_secret_key: SecretStr = SecretStr("icefjord-local-secret")
    s3_region: str = "us-east-1"
    s3_min_free_mib: int = Field(
        default=512,
        ge=1,
        description="SeaweedFS marks every volume read-only when its disk has less free space "
        "than this, and writes then fail. Its own default is 1% of the disk, which on a large "
        "disk shared with others can be gigabytes that are not ours to keep free.",
    )
    seaweedfs_module: str = "github.com/seaweedfs/seaweedfs"
    seaweedfs_version: str = "v0.0.0-20261109003541-7506e5f91cd6"
    catalog_database: str = "icefjord_catalog"
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
    # Trino for the readers (icefjord/readers/trino.py); not part of `local up`. 477 and
    # later are refused by some Maven mirrors, and 476 runs on Java 24+ (Temurin 25 here).
    trino_version: str = "476"
    trino_port: int = 8095
    # A 2-core machine shared with Kafka, Spark and the services: reading test tables
    # needs little; Trino's own default (80% of RAM) would crowd everything else out.
    trino_heap: str = "1G"
    normalizer_port: int = 9401
    compiled_services: bool = Field(
        default=True,
        description="Run the normalizer and the writer from <state_dir>/compiled (make "
        "compiled) while that build matches the sources; false: always plain CPython.",
    )
    watcher_port: int = 9402
    writer_port: int = 9403
    maintainer_port: int = 9404
    console_port: int = 9405

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
        scheme = "https" if self.secured else "http"
        return f"{scheme}://{self.host}:{self.registry_port}/apis/ccompat/v7"

    @property
    def secured(self) -> bool:
        return self.security == "sasl_ssl"

    @property
    def security_files(self) -> SecurityFiles:
        return SecurityFiles(self.state / "security")

    def kafka_settings(self, client_id: str = "icefjord") -> KafkaSettings:
        """How a client reaches this stack's broker: the one way the CLI, the demo, the
        benchmarks and the tests build theirs. With security on, SASL_SSL as the stack's
        user, trusting the stack's CA (raises SecurityError before the first ``up``)."""
        if not self.secured:
            return KafkaSettings(bootstrap_servers=self.bootstrap_servers, client_id=client_id)
        files = self.security_files
        return KafkaSettings(
            bootstrap_servers=self.bootstrap_servers,
            client_id=client_id,
            security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_username=self.kafka_user,
            sasl_password=files.secrets().kafka_password,
            ssl_ca_location=str(files.ca_pem),
        )

    def registry_settings(self) -> RegistrySettings:
        """How a client reaches this stack's registry (HTTPS and basic auth when secured)."""
        if not self.secured:
            return RegistrySettings(url=self.registry_url)
        files = self.security_files
        password = files.secrets().registry_password.get_secret_value()
        return RegistrySettings(
            url=self.registry_url,
            basic_auth_user_info=SecretStr(f"{self.registry_user}:{password}"),
            ssl_ca_location=str(files.ca_pem),
        )

    def kafka_java_client_properties(self) -> dict[str, str]:
        """The same as :meth:`kafka_settings` for a Java client (Kafka Connect's worker and
        its producers, consumers and admin clients); empty when security is off."""
        if not self.secured:
            return {}
        files = self.security_files
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": jaas_plain(self.kafka_user, files.secrets().kafka_password),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(files.ca_pem),
        }

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

    @property
    def s3_endpoint(self) -> str:
        return f"http://{self.host}:{self.s3_port}"

    @property
    def warehouse_uri(self) -> str:
        """Where the catalog puts new tables: the local folder or the local bucket."""
        if self.warehouse_store == "s3":
            return f"s3://{self.s3_bucket}/warehouse"
        return self.warehouse.as_uri()

    @property
    def catalog_uri(self) -> str:
        """The JDBC catalog as a SQLAlchemy URL (pyiceberg's ``uri``)."""
        if self.catalog_store == "postgres":
            return (
                f"postgresql+psycopg2://{self.postgres_user}@{self.host}:{self.postgres_port}"
                f"/{self.catalog_database}"
            )
        return f"sqlite:///{self.catalog_db}?timeout=30"

    @property
    def catalog_file(self) -> Path:
        """Where ``local up`` writes the catalog's properties (``shared.catalog`` reads them)."""
        return self.state / "catalog" / "properties.json"

    def running_catalog_properties(self) -> dict[str, str]:
        """The properties of the catalog the running stack was started with (a demo may
        move PostgreSQL's port for its source; the catalog stays where it was)."""
        if self.catalog_file.is_file():
            return {str(k): str(v) for k, v in json.loads(self.catalog_file.read_text()).items()}
        return self.catalog_properties()

    def catalog_properties(self) -> dict[str, str]:
        """The local catalog's properties, pyiceberg's names (Spark's side translates them,
        ``shared.catalog.spark_catalog_conf``)."""
        properties = {"type": "sql", "uri": self.catalog_uri, "warehouse": self.warehouse_uri}
        if self.warehouse_store == "s3":
            properties.update(
                {
                    "s3.endpoint": self.s3_endpoint,
                    "s3.access-key-id": self.s3_access_key,
                    "s3.secret-access-key": self.s3_secret_key.get_secret_value(),
                    "client.region": self.s3_region,
                    "s3.path-style-access": "true",
                }
            )
        return properties
