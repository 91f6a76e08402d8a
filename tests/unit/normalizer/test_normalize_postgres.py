"""normalize() on Postgres full envelopes (JSON with schemas): every op, tombstones, keys."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import pytest

from services.cdc_normalizer.normalize import (
    Normalized,
    NormalizeOptions,
    Operation,
    RejectedRecord,
    TableOverrides,
    Tombstone,
    normalize,
)
from services.cdc_normalizer.table_schema import TableId

pytestmark = pytest.mark.unit

UTC = dt.UTC

EXPECTED_AFTER = {
    "id": 1001,
    "customer_id": 42,
    "total": Decimal("1234.50"),
    "discount": "12.345",
    "order_date": dt.date(2022, 1, 8),
    "created_at": dt.datetime(2022, 1, 8, 10, 15, 30, 123456, tzinfo=UTC),
    "updated_at": dt.datetime(2022, 1, 8, 10, 15, 30, 123456),
    "pickup_time": dt.time(10, 15, 30, 123456),
    "tags": ["gift", None, "express"],
    "metadata": '{"channel": "web", "items": [1, 2]}',
    "external_id": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "status": "paid",
    "is_gift": True,
    "flag": False,
    "mask": b"\xff",
    "location": {"wkb": struct.pack("<BIdd", 1, 1, 1.0, 2.0), "srid": 4326},
}


def _single(result: object) -> Normalized:
    assert isinstance(result, Normalized), result
    assert len(result.changes) == 1
    return result


def test_create_event_is_fully_typed(pg_message, events) -> None:
    result = _single(normalize(pg_message("c", after=events.pg_after())))
    change = result.changes[0]
    assert change.op is Operation.CREATE
    assert change.table == TableId("public", "orders")
    assert change.key == {"id": 1001}
    assert change.after == EXPECTED_AFTER
    assert change.source_ts_ms == 1641636930500
    assert change.tx_id == "555"
    # sequence ["24023120","24023128"] then txId 555
    assert change.position == "00000000000024023120.00000000000024023128.00000000000000000555"


def test_source_map_keeps_coordinates_as_strings(pg_message, events) -> None:
    change = _single(normalize(pg_message("c", after=events.pg_after()))).changes[0]
    source = change.source
    assert source["connector"] == "postgresql"
    assert source["db"] == "shop"
    assert source["schema"] == "public"
    assert source["table"] == "orders"
    assert source["lsn"] == "24023128"
    assert source["sequence"] == '["24023120","24023128"]'
    assert source["origin_topic"] == "shop.public.orders"
    assert source["origin_partition"] == "0"
    assert source["origin_offset"] == "17"
    assert source["position_kind"] == "postgresql"
    assert "xmin" not in source  # null fields are left out
    assert all(isinstance(v, str) for v in source.values())


def test_update_uses_after_image(pg_message, events) -> None:
    before = events.pg_after()
    after = events.pg_after()
    after["status"] = "shipped"
    change = _single(normalize(pg_message("u", before=before, after=after))).changes[0]
    assert change.op is Operation.UPDATE
    assert change.after is not None and change.after["status"] == "shipped"


def test_snapshot_read(pg_message, events) -> None:
    source = events.pg_source(snapshot="true", sequence='[null,"24023128"]', txId=550)
    change = _single(normalize(pg_message("r", after=events.pg_after(), source=source))).changes[0]
    assert change.op is Operation.READ
    assert change.position == "00000000000000000000.00000000000024023128.00000000000000000550"
    assert change.source["snapshot"] == "true"


def test_delete_has_key_and_no_after(pg_message, events) -> None:
    # REPLICA IDENTITY DEFAULT: the before image holds only the key, other columns null.
    before = dict.fromkeys(events.pg_after())
    before["id"] = 1001
    before["customer_id"] = 0
    result = _single(normalize(pg_message("d", before=before)))
    change = result.changes[0]
    assert change.op is Operation.DELETE
    assert change.key == {"id": 1001}
    assert change.after is None
    assert result.schema is not None and result.schema.key_columns == ("id",)


def test_transaction_metadata_wins_for_tx_id(pg_message, events) -> None:
    tx = {"id": "555:24023128", "total_order": 3, "data_collection_order": 1}
    change = _single(normalize(pg_message("c", after=events.pg_after(), transaction=tx)))
    assert change.changes[0].tx_id == "555:24023128"


def test_truncate_yields_one_truncate_change(events) -> None:
    value = events.pg_record("t")
    result = _single(normalize(events.message(value, None)))
    change = result.changes[0]
    assert change.op is Operation.TRUNCATE
    assert change.key == {}
    assert change.after is None
    assert change.table == TableId("public", "orders")
    assert result.schema is None  # no key: the service uses the latest registered schema


def test_truncate_with_configured_key_has_schema(events) -> None:
    options = NormalizeOptions(default=TableOverrides(key_columns=("id",)))
    result = _single(normalize(events.message(events.pg_record("t"), None), options))
    assert result.schema is not None and result.schema.key_columns == ("id",)


def test_tombstone_is_recognised(events) -> None:
    result = normalize(events.message(None, events.pg_key()))
    assert isinstance(result, Tombstone)
    assert result.key == {"id": 1001}
    assert result.table == TableId("public", "orders")
    assert result.origin.offset == 17


def test_tombstone_with_unreadable_key_still_a_tombstone(events) -> None:
    message = events.message(None, None)
    message = type(message)(b"\xff\x00", None, message.origin)
    result = normalize(message)
    assert isinstance(result, Tombstone) and result.key is None


def test_configured_key_columns_override_debezium_key(pg_message, events) -> None:
    options = NormalizeOptions(default=TableOverrides(key_columns=("customer_id", "id")))
    result = _single(normalize(pg_message("c", after=events.pg_after()), options))
    assert result.changes[0].key == {"customer_id": 42, "id": 1001}
    assert result.schema is not None
    assert result.schema.key_columns == ("customer_id", "id")


def test_table_without_primary_key_needs_configured_columns(events) -> None:
    message = events.message(events.pg_record("c", after=events.pg_after()), None)
    rejected = normalize(message)
    assert isinstance(rejected, RejectedRecord) and rejected.reason == "missing_key"
    options = NormalizeOptions(tables={"public.orders": TableOverrides(key_columns=("id",))})
    assert _single(normalize(message, options)).changes[0].key == {"id": 1001}


def test_overrides_by_topic_can_rename_table(pg_message, events) -> None:
    target = TableId("sales", "orders_v2")
    options = NormalizeOptions(tables={"shop.public.orders": TableOverrides(table=target)})
    result = _single(normalize(pg_message("c", after=events.pg_after()), options))
    assert result.table == target and result.changes[0].table == target


def test_decoded_json_input_equals_bytes_input(events) -> None:
    value, key = events.pg_record("c", after=events.pg_after()), events.pg_key()
    from_bytes = normalize(events.message(value, key))
    from_dicts = normalize(events.message(value, key, as_bytes=False))
    assert from_bytes == from_dicts


def test_equal_source_schemas_give_equal_table_schemas(pg_message, events) -> None:
    first = _single(normalize(pg_message("c", after=events.pg_after())))
    after = events.pg_after()
    after["id"] = 2
    second = _single(normalize(pg_message("u", after=after)))
    assert first.schema == second.schema


PLACEHOLDER = "__debezium_unavailable_value"


def test_update_placeholders_become_unchanged_columns(pg_message, events) -> None:
    """An update without an unchanged TOASTed value (REPLICA IDENTITY DEFAULT): the columns are
    listed as unchanged, in column order, with a null stand-in; the rest is typed as usual."""
    after = events.pg_after()
    after["metadata"] = PLACEHOLDER
    after["tags"] = [PLACEHOLDER]
    change = _single(normalize(pg_message("u", after=after))).changes[0]
    assert change.op is Operation.UPDATE
    assert change.unchanged == ("tags", "metadata")
    assert change.after is not None
    assert change.after["tags"] is None and change.after["metadata"] is None
    expected = {k: v for k, v in EXPECTED_AFTER.items() if k not in ("tags", "metadata")}
    assert {k: v for k, v in change.after.items() if k in expected} == expected
    record = change.to_record()
    assert record["unchanged"] == ["tags", "metadata"]


def test_whole_update_has_no_unchanged_columns(pg_message, events) -> None:
    change = _single(normalize(pg_message("u", after=events.pg_after()))).changes[0]
    assert change.unchanged is None
    assert change.to_record()["unchanged"] is None


@pytest.mark.parametrize("op", ["c", "r"])
def test_placeholder_in_a_whole_row_is_rejected(pg_message, events, op) -> None:
    """An insert or a snapshot read has no stored row to keep a value from."""
    after = events.pg_after()
    after["metadata"] = PLACEHOLDER
    rejected = normalize(pg_message(op, after=after))
    assert isinstance(rejected, RejectedRecord)
    assert rejected.reason == "unavailable_value"
    assert "metadata" in rejected.message


def test_placeholder_as_a_real_value_of_another_kind_is_kept(pg_message, events) -> None:
    """Only string, bytes and array columns can hold the placeholder: the text in a string
    column is the placeholder, the same text inside a longer value is data."""
    after = events.pg_after()
    after["metadata"] = f'"{PLACEHOLDER}"'
    change = _single(normalize(pg_message("u", after=after))).changes[0]
    assert change.unchanged is None
    assert change.after is not None and change.after["metadata"] == f'"{PLACEHOLDER}"'


def test_missing_timestamps_fall_back_to_kafka_then_reject(events) -> None:
    source = events.pg_source()
    del source["ts_ms"]
    record = events.pg_record("c", after=events.pg_after(), source=source)
    record["payload"]["ts_ms"] = None
    assert _single(normalize(events.message(record, events.pg_key()))).changes[0].source_ts_ms == (
        1641636931100
    )
    rejected = normalize(events.message(record, events.pg_key(), timestamp_ms=None))
    assert isinstance(rejected, RejectedRecord) and rejected.reason == "missing_timestamp"
