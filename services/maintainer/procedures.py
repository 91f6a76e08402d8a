"""The ``CALL <catalog>.system.<procedure>(...)`` statements, rendered from parsed values.

Pure. Every piece of text comes from :mod:`identifiers` (quoted names, escaped literals) or
from :mod:`requests` (allow-listed option keys with re-rendered values); nothing from a
request reaches SQL as it arrived.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from services.maintainer.identifiers import PartitionFilter, TableId, quote_identifier, sql_string
from services.maintainer.requests import OptionValue, render_option
from shared.lease import LEASE_PROPERTY

__all__ = [
    "expire_snapshots_sql",
    "lease_sql",
    "release_lease_sql",
    "remove_orphan_files_sql",
    "rewrite_data_files_sql",
    "rewrite_manifests_sql",
    "rewrite_position_deletes_sql",
    "timestamp_literal",
]


def timestamp_literal(ms: int) -> str:
    """A timestamp literal for Unix time ``ms``, explicit about UTC so the session's time
    zone does not matter: ``TIMESTAMP '2024-05-01 12:00:00.250Z'``."""
    instant = datetime.fromtimestamp(ms / 1000, UTC)
    return f"TIMESTAMP '{instant.strftime('%Y-%m-%d %H:%M:%S')}.{ms % 1000:03d}Z'"


def _procedure(catalog: str, name: str) -> str:
    return f"{quote_identifier(catalog)}.system.{name}"


def _table_arg(table: TableId) -> str:
    return f"table => {sql_string(table.quoted())}"


def _options_arg(options: Mapping[str, OptionValue]) -> str | None:
    if not options:
        return None
    pairs = ", ".join(
        f"{sql_string(key)}, {sql_string(render_option(value))}"
        for key, value in sorted(options.items())
    )
    return f"options => map({pairs})"


def _call(catalog: str, name: str, arguments: list[str | None]) -> str:
    rendered = ", ".join(a for a in arguments if a is not None)
    return f"CALL {_procedure(catalog, name)}({rendered})"


def rewrite_data_files_sql(
    catalog: str,
    table: TableId,
    scope: PartitionFilter | None,
    options: Mapping[str, OptionValue],
) -> str:
    """Binpack the table (or the files matching ``scope``) to its target file size."""
    where = None if scope is None else f"where => {sql_string(scope.render(quoted=True))}"
    return _call(
        catalog,
        "rewrite_data_files",
        [_table_arg(table), "strategy => 'binpack'", _options_arg(options), where],
    )


def rewrite_position_deletes_sql(
    catalog: str,
    table: TableId,
    scope: PartitionFilter | None,
    options: Mapping[str, OptionValue],
) -> str:
    """Compact position delete files and drop their entries for files no longer live."""
    where = None if scope is None else f"where => {sql_string(scope.render(quoted=True))}"
    return _call(
        catalog,
        "rewrite_position_delete_files",
        [_table_arg(table), _options_arg(options), where],
    )


def lease_sql(catalog: str, table: TableId, until_ms: int) -> str:
    """Take the compaction lease (``shared.lease``) until Unix time ``until_ms``."""
    return (
        f"ALTER TABLE {table.quoted(catalog)} SET TBLPROPERTIES "
        f"({sql_string(LEASE_PROPERTY)} = {sql_string(str(int(until_ms)))})"
    )


def release_lease_sql(catalog: str, table: TableId) -> str:
    """Give the compaction lease back."""
    return (
        f"ALTER TABLE {table.quoted(catalog)} UNSET TBLPROPERTIES IF EXISTS "
        f"({sql_string(LEASE_PROPERTY)})"
    )


def expire_snapshots_sql(catalog: str, table: TableId, older_than_ms: int, retain_last: int) -> str:
    """Expire snapshots committed strictly before ``older_than_ms``, keeping the newest
    ``retain_last`` ancestors of the current snapshot."""
    if retain_last < 1:
        raise ValueError("retain_last must be at least 1")
    return _call(
        catalog,
        "expire_snapshots",
        [
            _table_arg(table),
            f"older_than => {timestamp_literal(older_than_ms)}",
            f"retain_last => {int(retain_last)}",
        ],
    )


def remove_orphan_files_sql(
    catalog: str, table: TableId, older_than_ms: int, *, dry_run: bool = False
) -> str:
    """Delete files under the table location that no snapshot references and that are older
    than ``older_than_ms`` (the procedure refuses anything younger than 24 h).

    The location is listed through the table's own FileIO (``prefix_listing``), not a
    Hadoop file system: S3FileIO lists an S3 warehouse, where Hadoop would need its S3
    file system, which the images do not carry."""
    return _call(
        catalog,
        "remove_orphan_files",
        [
            _table_arg(table),
            f"older_than => {timestamp_literal(older_than_ms)}",
            f"dry_run => {'true' if dry_run else 'false'}",
            "prefix_listing => true",
        ],
    )


def rewrite_manifests_sql(catalog: str, table: TableId) -> str:
    """Regroup the current snapshot's manifests by partition (without Spark caching, which
    would hold executor memory the writer needs)."""
    return _call(catalog, "rewrite_manifests", [_table_arg(table), "use_caching => false"])
