"""icefjord.bulk.load: the connector settings of a bulk snapshot."""

from __future__ import annotations

import pytest

from icefjord.bulk.load import snapshot_overrides

pytestmark = pytest.mark.unit


def test_every_table_is_snapshotted_one_row_at_most() -> None:
    config = snapshot_overrides("shop", ["orders", 'odd"name'])
    assert config["snapshot.select.statement.overrides"] == 'shop.orders,shop.odd"name'
    assert config["snapshot.select.statement.overrides.shop.orders"] == (
        'SELECT * FROM "shop"."orders" LIMIT 1'
    )
    assert config['snapshot.select.statement.overrides.shop.odd"name'] == (
        'SELECT * FROM "shop"."odd""name" LIMIT 1'
    )
    assert len(config) == 3


def test_no_tables_no_overrides() -> None:
    assert snapshot_overrides("shop", []) == {}
