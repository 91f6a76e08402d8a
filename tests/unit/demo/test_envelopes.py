"""The generator's Debezium events: encodings, and a round trip through the normalizer core.

The integration tests hold the generator to what the real Debezium connector emits; here the
encodings are checked against Debezium's documented forms and the events are fed to the
normalizer's pure core, whose output must equal the generator's source rows.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

import pytest

from icefjord.demo.canonical import canonical
from icefjord.demo.envelopes import (
    EnvelopeEncoder,
    SourcePosition,
    encode_value,
    envelope_schema,
    field_schema,
    key_schema,
)
from icefjord.demo.model import CUSTOMERS, INITIAL_TABLES, ORDERS, SHIPMENTS, Column, Kind
from icefjord.demo.plan import Planner, RowChange, WorkloadSpec
from services.cdc_normalizer.connect_schema import connect_schema_from_json
from services.cdc_normalizer.errors import InvalidSchema
from services.cdc_normalizer.normalize import (
    DebeziumMessage,
    Normalized,
    Origin,
    Tombstone,
    normalize,
)

pytestmark = pytest.mark.unit


def _accepts_json_float() -> bool:
    try:
        connect_schema_from_json({"type": "float", "optional": True}, "probe")
    except InvalidSchema:
        return False
    return True


# Kafka's JsonConverter spells Connect's FLOAT32/FLOAT64 "float"/"double" (as Debezium emits).
NORMALIZER_FLOAT_BUG = not _accepts_json_float()


@pytest.mark.parametrize(
    ("unscaled", "expected"),
    [(1250, "BOI="), (0, "AA=="), (-1, "/w=="), (128, "AIA="), (-128, "gA=="), (255, "AP8=")],
)
def test_decimal_bytes_are_java_big_integer_bytes(unscaled: int, expected: str) -> None:
    column = Column("n", Kind.NUMERIC, precision=12, scale=2)
    assert encode_value(column, Decimal(unscaled).scaleb(-2)) == expected


def test_variable_scale_decimal_drops_trailing_fraction_zeros_like_debezium() -> None:
    column = Column("n", Kind.NUMERIC_ANY)
    encoded = encode_value(column, Decimal("77.95690"))
    assert encoded["scale"] == 4
    assert int.from_bytes(base64.b64decode(encoded["value"]), "big", signed=True) == 779569
    assert encode_value(column, Decimal("1500"))["scale"] == 0


def test_temporal_and_other_encodings() -> None:
    tz = dt.timezone(dt.timedelta(hours=-5))
    instant = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=tz)
    assert encode_value(Column("t", Kind.TIMESTAMPTZ), instant) == "2024-01-02T08:04:05.000000Z"
    naive = dt.datetime(2024, 1, 2, 3, 4, 5, 123456)
    assert encode_value(Column("t", Kind.TIMESTAMP, precision=6), naive) == 1704164645123456
    millis = dt.datetime(2024, 1, 2, 3, 4, 5, 123000)
    assert encode_value(Column("t", Kind.TIMESTAMP, precision=3), millis) == 1704164645123
    assert encode_value(Column("d", Kind.DATE), dt.date(2024, 2, 29)) == 19782
    assert encode_value(Column("t", Kind.TIME), dt.time(13, 14, 15, 123456)) == 47655123456
    assert encode_value(Column("b", Kind.BYTEA), b"\x00\xff") == "AP8="
    assert encode_value(Column("j", Kind.JSONB), {"z": 1, "a": 1.5, "bb": "ü"}) == (
        '{"a": 1.5, "z": 1, "bb": "ü"}'  # jsonb: shorter keys first
    )


def test_schemas_name_the_table_and_mark_keys_required() -> None:
    value = envelope_schema("demo", "shop", ORDERS)
    assert value["name"] == "demo.shop.orders.Envelope"
    assert [f["field"] for f in value["fields"]] == [
        "before",
        "after",
        "source",
        "transaction",
        "op",
        "ts_ms",
        "ts_us",
        "ts_ns",
    ]
    key = key_schema("demo", "shop", ORDERS)
    assert key["fields"] == [
        {
            "type": "string",
            "optional": False,
            "name": "io.debezium.data.Uuid",
            "version": 1,
            "field": "id",
        }
    ]
    assert field_schema(CUSTOMERS.column("credit"))["parameters"] == {"scale": "2"}


def _normalize(records: list[tuple[bytes, bytes | None]], topic: str) -> list[object]:
    return [
        normalize(DebeziumMessage(key=k, value=v, origin=Origin(topic, 0, i, 1)))
        for i, (k, v) in enumerate(records)
    ]


@pytest.mark.parametrize("table", [t.name for t in (*INITIAL_TABLES, SHIPMENTS)])
def test_generated_events_normalize_to_the_source_rows(table: str) -> None:
    planner = Planner(WorkloadSpec(rate=300, duration_s=6, initial_rows=20, seed=11))
    for _ in planner.seed():
        pass
    for _ in planner.changes():
        pass
    definition = planner.model.tables[table]
    encoder = EnvelopeEncoder("demo", "icefjord", "shop")
    position = SourcePosition(lsn=100, last_commit_lsn=50, tx_id=7, commit_ts_us=1_700_000_000)
    records = []
    rows = list(planner.model.rows[table].values())
    for row in rows:
        for record in encoder.records(definition, RowChange(table, "c", None, row), position, 1):
            records.append((record.key, record.value))
    deleted = encoder.records(definition, RowChange(table, "d", rows[0], None), position, 1)
    records.extend((r.key, r.value) for r in deleted)

    results = _normalize(records, encoder.topic(table))
    rejected = [r for r in results if not isinstance(r, Normalized | Tombstone)]
    if rejected and NORMALIZER_FLOAT_BUG and "'float'" in str(rejected[0]):
        pytest.xfail("cdc-normalizer rejects JsonConverter's 'float'/'double' type names")
    assert rejected == []
    changes = [c for r in results if isinstance(r, Normalized) for c in r.changes]
    assert [c.op.value for c in changes] == ["CREATE"] * len(rows) + ["DELETE"]
    assert isinstance(results[-1], Tombstone)
    assert changes[-1].key == {k: changes[0].key[k] for k in definition.key}
    for change, row in zip(changes, rows, strict=False):
        assert change.table.namespace == "shop" and change.table.name == table
        assert change.source_ts_ms == 1_700_000
        assert change.after is not None
        for column in definition.columns:
            assert canonical(column.kind, change.after[column.name]) == canonical(
                column.kind, row[column.name]
            ), column.name


def test_snapshot_and_key_change_envelope_fields() -> None:
    encoder = EnvelopeEncoder("demo", "icefjord", "shop")
    row = {c.name: None for c in SHIPMENTS.columns} | {"id": 5, "order_id": "o", "carrier": "UPS"}
    snapshot = SourcePosition(
        lsn=10, last_commit_lsn=None, tx_id=3, commit_ts_us=2_000_000, snapshot="first"
    )
    (read,) = encoder.records(SHIPMENTS, RowChange("shipments", "c", None, row), snapshot, 9, "r")
    assert read.value is not None
    payload = json.loads(read.value)["payload"]
    assert payload["op"] == "r" and payload["source"]["snapshot"] == "first"
    assert payload["source"]["sequence"] == '[null,"10"]'
    assert (payload["ts_ms"], payload["source"]["ts_ms"]) == (0, 2000)
    header = ("__debezium.newkey", encoder.key_header(SHIPMENTS, row | {"id": 6}))
    moved = SourcePosition(lsn=20, last_commit_lsn=15, tx_id=4, commit_ts_us=3_000_000)
    delete, tombstone = encoder.records(
        SHIPMENTS, RowChange("shipments", "d", row, None), moved, 9, key_change=header
    )
    assert tombstone.value is None and tombstone.key == delete.key
    assert dict(delete.headers)["__debezium.newkey"] == b'{"id":6}'
    assert json.loads(delete.value or b"")["payload"]["source"]["sequence"] == '["15","20"]'
