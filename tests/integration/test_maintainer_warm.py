"""The maintainer's warm-up against the real Spark and catalog."""

from __future__ import annotations

from typing import Any

import pytest
from harness import Stack

from services.maintainer.warm import warm_up, warm_up_storage
from shared.catalog import open_catalog


def test_the_warm_up_runs_every_procedure_and_leaves_no_trace(stack: Stack, spark: Any) -> None:
    """Every procedure runs (a failing one raises) on a table the real catalog never sees."""
    catalog = open_catalog(stack.catalog)
    before = set(catalog.list_namespaces())
    assert warm_up(spark) > 0
    assert set(catalog.list_namespaces()) == before
    # The scratch catalog's directory is gone with the table and its namespace.
    with pytest.raises(Exception, match="Namespace does not exist"):
        spark.sql("SHOW TABLES IN icefjord_maintainer_warm_up.warm_up").collect()


def test_the_storage_warm_up_reads_the_first_real_table_and_writes_nothing(
    stack: Stack, spark: Any, namespace: str
) -> None:
    table = f"{namespace}.warmed"
    spark.sql(f"CREATE TABLE icefjord.{table} (id BIGINT, v STRING) USING iceberg")
    spark.sql(f"INSERT INTO icefjord.{table} VALUES (1, 'a'), (2, 'b')")
    loaded = open_catalog(stack.catalog).load_table(table)
    before = (loaded.metadata_location, loaded.metadata.current_snapshot_id)

    assert warm_up_storage(spark, stack.catalog.name, ["not a table", table]) == table
    assert warm_up_storage(spark, stack.catalog.name, []) is None
    after = open_catalog(stack.catalog).load_table(table)
    assert (after.metadata_location, after.metadata.current_snapshot_id) == before
