"""The Iceberg catalog, shared by pyiceberg (Python side) and Spark (JVM side).

Catalog properties follow pyiceberg's own convention (``PYICEBERG_CATALOG__<NAME>__<KEY>``
or ``.pyiceberg.yaml``), read by pyiceberg itself; without them, the local stack's JDBC
catalog on SQLite is used. :func:`spark_catalog_conf` translates the same properties for
Spark's ``SparkCatalog`` so both engines see the same tables.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.utils.config import Config

from shared.settings import CatalogSettings


def catalog_properties(settings: CatalogSettings) -> dict[str, str]:
    """The catalog's properties: pyiceberg's configuration if any, else the local defaults."""
    configured = Config().get_catalog_config(settings.name)
    if configured:
        return {str(k): str(v) for k, v in configured.items()}
    state = settings.local_state_dir.expanduser().resolve()
    return {
        "type": "sql",
        "uri": f"sqlite:///{state / 'catalog' / 'catalog.db'}?timeout=30",
        "warehouse": (state / "warehouse").as_uri(),
    }


def open_catalog(settings: CatalogSettings) -> Catalog:
    """A pyiceberg catalog for ``settings``."""
    return load_catalog(settings.name, **catalog_properties(settings))


def spark_catalog_conf(name: str, properties: dict[str, str]) -> dict[str, str]:
    """Spark configuration for an Iceberg ``SparkCatalog`` named ``name``.

    Supports pyiceberg's ``sql`` catalogs on SQLite or PostgreSQL (as Iceberg's
    ``JdbcCatalog``) and ``rest`` catalogs. Raises ValueError for anything else.
    """
    prefix = f"spark.sql.catalog.{name}"
    # No table cache: the writer, the maintainer and other engines commit to the same
    # tables, and a cached Table would serve a stale snapshot to the next read.
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.cache-enabled": "false"}
    kind = properties.get("type", "rest")
    if kind == "sql":
        conf[f"{prefix}.type"] = "jdbc"
        conf[f"{prefix}.jdbc.schema-version"] = "V1"
        # pyiceberg creates the catalog tables (see build_spark_session); Iceberg's own
        # initialisation leaves a metadata ResultSet open, which on SQLite holds a read lock
        # for the life of the pooled connection and makes every other writer fail.
        conf[f"{prefix}.jdbc.init-catalog-tables"] = "false"
        conf.update(_jdbc_url(prefix, properties["uri"]))
    elif kind == "rest":
        conf[f"{prefix}.type"] = "rest"
        conf[f"{prefix}.uri"] = properties["uri"]
    else:
        raise ValueError(f"catalog type {kind!r} is not supported by Icefjord's Spark side")
    if "warehouse" in properties:
        conf[f"{prefix}.warehouse"] = properties["warehouse"]
    for key, value in properties.items():
        # Object-store settings (s3.endpoint, s3.access-key-id, ...) mean the same in both.
        if key.startswith(("s3.", "io-impl", "client.")):
            conf[f"{prefix}.{key}"] = value
    return conf


def _jdbc_url(prefix: str, uri: str) -> dict[str, str]:
    """Translate a SQLAlchemy URL (pyiceberg) into a JDBC URL (Iceberg's JdbcCatalog)."""
    if uri.startswith("sqlite:///"):
        path = uri.removeprefix("sqlite:///").split("?", 1)[0]
        # WAL lets Spark's pooled connections read while pyiceberg commits, and the busy
        # timeout makes two writers queue instead of failing with "database is locked".
        return {f"{prefix}.uri": f"jdbc:sqlite:{path}?busy_timeout=30000"}
    parts = urlsplit(uri)
    if parts.scheme.split("+")[0] == "postgresql":
        out: dict[str, Any] = {
            f"{prefix}.uri": f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}{parts.path}"
        }
        if parts.username:
            out[f"{prefix}.jdbc.user"] = parts.username
        if parts.password:
            out[f"{prefix}.jdbc.password"] = parts.password
        return out
    raise ValueError(f"unsupported catalog URI scheme in {uri!r}")
