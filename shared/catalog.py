"""The Iceberg catalog, shared by pyiceberg (Python side) and Spark (JVM side).

Catalog properties follow pyiceberg's own convention (``PYICEBERG_CATALOG__<NAME>__<KEY>``
or ``.pyiceberg.yaml``), read by pyiceberg itself; without them, the local stack's catalog
(the properties ``icefjord local up`` wrote under its state directory, else its JDBC
catalog on SQLite) is used. :func:`spark_catalog_conf` translates the same properties for
Spark's ``SparkCatalog`` so both engines see the same tables.
"""

from __future__ import annotations

import json
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
    written = state / "catalog" / "properties.json"
    if written.is_file():
        return {str(k): str(v) for k, v in json.loads(written.read_text()).items()}
    return {
        "type": "sql",
        "uri": f"sqlite:///{state / 'catalog' / 'catalog.db'}?timeout=30",
        "warehouse": (state / "warehouse").as_uri(),
    }


def open_catalog(settings: CatalogSettings) -> Catalog:
    """A pyiceberg catalog for ``settings``."""
    return load_catalog(settings.name, **catalog_properties(settings))


# Object-store settings (s3.endpoint, s3.access-key-id, ...) mean the same in both engines.
_IO_PREFIXES = ("s3.", "io-impl", "client.")
# pyiceberg's own properties, which mean nothing to Iceberg's Java catalogs.
_PYICEBERG_ONLY = frozenset({"type", "py-io-impl"})
# Secret-bearing catalog properties (by a word in their last part, or any REST header).
_SECRET_WORDS = ("password", "secret", "token", "credential", "access-key-id")


def spark_catalog_conf(name: str, properties: dict[str, str]) -> dict[str, str]:
    """Spark configuration for an Iceberg ``SparkCatalog`` named ``name``.

    Supports pyiceberg's ``sql`` catalogs on SQLite or PostgreSQL (as Iceberg's
    ``JdbcCatalog``) and ``rest`` catalogs, whose every property (``credential``,
    ``token``, ``oauth2-server-uri``, ``scope``, ``header.*``, ...) passes as it is. A
    warehouse on S3 without an ``io-impl`` reads and writes through Iceberg's ``S3FileIO``
    (the ``s3.*`` and ``client.*`` properties mean the same to it as to pyiceberg).
    Raises ValueError for anything else.
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
        passed = [k for k in properties if k == "warehouse" or k.startswith(_IO_PREFIXES)]
        warehouse = properties.get("warehouse", "")
        if warehouse.startswith(("s3://", "s3a://")) and "io-impl" not in properties:
            conf[f"{prefix}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
    elif kind == "rest":
        conf[f"{prefix}.type"] = "rest"
        passed = [k for k in properties if k not in _PYICEBERG_ONLY]
    else:
        raise ValueError(f"catalog type {kind!r} is not supported by Icefjord's Spark side")
    for key in passed:
        conf[f"{prefix}.{key}"] = properties[key]
    return conf


def is_secret(key: str) -> bool:
    """Whether a Spark catalog setting carries a secret, to be kept off command lines."""
    last = key.rsplit(".", 1)[-1].lower()
    return ".header." in key or any(word in last for word in _SECRET_WORDS)


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
