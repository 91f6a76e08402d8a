"""Whether a quarantined row fits its table now, and the bytes a replay puts back."""

from __future__ import annotations

from typing import Any

import pytest

from icefjord.quarantine import Quarantined, TableSchemas, dropped_fields, resolve
from icefjord.replay import ReplayError
from shared.avro import decode, encode, parse

pytestmark = pytest.mark.unit


def change_schema(*columns: tuple[str, Any]) -> Any:
    row = {
        "type": "record",
        "name": "Row",
        "namespace": "shop",
        "fields": [{"name": name, "type": kind} for name, kind in columns],
    }
    return parse(
        {
            "type": "record",
            "name": "Change",
            "namespace": "shop",
            "fields": [
                {"name": "op", "type": "string"},
                {"name": "after", "type": ["null", row], "default": None},
            ],
        }
    )


# id 1: the table's first version; 2: the quarantined one (a column narrowed to int and a
# new one); 3: the fix forward (the new column, the old type kept); 4: a required column.
SCHEMAS = {
    1: change_schema(("id", "long"), ("qty", "long")),
    2: change_schema(("id", "long"), ("qty", "int"), ("note", ["null", "string"])),
    3: change_schema(("id", "long"), ("qty", "long"), ("note", ["null", "string"])),
    4: change_schema(("id", "long"), ("qty", "long"), ("note", "string")),
}


class Registry:
    def writer_schema(self, schema_id: int) -> Any:
        return SCHEMAS[schema_id]


def held(schema_id: int, after: dict[str, Any]) -> Quarantined:
    value = encode(schema_id, SCHEMAS[schema_id], {"op": "UPDATE", "after": after})
    return Quarantined(
        topic="icefjord.quarantine",
        partition=0,
        offset=3,
        key=b"k",
        value=value,
        table="shop.orders",
        schema_id=schema_id,
        reason="schema version 2 quarantined: narrowed",
        quarantined_at_ms=0,
        source_topic="icefjord.changes.shop.orders",
        source_partition=4,
        source_offset=17,
    )


def test_a_row_of_an_applied_schema_goes_back_as_it_is() -> None:
    record = held(2, {"id": 1, "qty": 5, "note": "x"})
    assert resolve(record, TableSchemas(3, frozenset({1, 2, 3})), Registry()) is record.value


def test_a_row_is_rewritten_into_the_current_schema_when_it_holds_every_value() -> None:
    record = held(2, {"id": 1, "qty": 5, "note": "x"})
    value = resolve(record, TableSchemas(3, frozenset({1, 3})), Registry())
    assert value is not None and value[1:5] == (3).to_bytes(4, "big")
    change = decode(value, SCHEMAS[3])
    assert change["after"][1] == {"id": 1, "qty": 5, "note": "x"}


def test_a_column_the_table_lacks_refuses_the_row_rather_than_drop_its_value() -> None:
    record = held(2, {"id": 1, "qty": 5, "note": "x"})
    assert dropped_fields(SCHEMAS[2], SCHEMAS[1]) == ["shop.Row.note"]
    with pytest.raises(ReplayError, match=r"shop.Row.note, which the table's schema \(id 1\)"):
        resolve(record, TableSchemas(1, frozenset({1})), Registry())


def test_a_value_that_does_not_resolve_refuses_the_row() -> None:
    record = held(3, {"id": 1, "qty": 5, "note": None})
    with pytest.raises(ReplayError, match="does not resolve from schema id 3"):
        resolve(record, TableSchemas(4, frozenset({1, 4})), Registry())


def test_the_row_goes_back_to_its_changes_topic_and_partition_marked() -> None:
    back = held(2, {"id": 1, "qty": 5, "note": None}).put_back(b"new")
    assert (back.topic, back.partition, back.key, back.value) == (
        "icefjord.changes.shop.orders",
        4,
        b"k",
        b"new",
    )
    assert back.coordinates == "icefjord.quarantine:0:3"
    assert back.headers == (("icefjord.replayed_from", b"icefjord.quarantine:0:3"),)


def test_a_schema_id_the_registry_lost_refuses_the_row() -> None:
    from shared.avro import WireFormatError

    class Forgetful(Registry):
        def writer_schema(self, schema_id: int) -> Any:
            if schema_id == 2:
                raise WireFormatError("schema id 2 is not registered")
            return SCHEMAS[schema_id]

    record = held(2, {"id": 1, "qty": 5, "note": "x"})
    with pytest.raises(ReplayError, match="schema id 2 is not registered"):
        resolve(record, TableSchemas(3, frozenset({1, 3})), Forgetful())
