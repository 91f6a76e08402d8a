"""The maintainer's warm-up against the real Spark and catalog."""

from __future__ import annotations

from typing import Any

import pytest
from harness import Stack

from services.maintainer.warm import warm_up
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
