"""Table-driven checks of every evolution rule: what is safe, what is quarantined, and why."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.schema_watcher import (
    EvolutionPlan,
    SchemaOperation,
    SchemaOperationKind,
    Verdict,
    plan_evolution,
)

pytestmark = pytest.mark.unit

ADD = SchemaOperationKind.ADD_COLUMN
WIDEN = SchemaOperationKind.WIDEN_TYPE
OPTIONAL = SchemaOperationKind.MAKE_OPTIONAL
RENAME = SchemaOperationKind.RENAME_COLUMN
DROP = SchemaOperationKind.SOFT_DROP_COLUMN


def row(*fields: dict[str, Any], name: str = "Row") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "io.icefjord.rows", "fields": list(fields)}


def fld(name: str, avro_type: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": avro_type, **extra}


def nullable(name: str, avro_type: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", avro_type], "default": None, **extra}


def record(name: str, *fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields)}


def dec(precision: int, scale: int, *, fixed_size: int | None = None) -> dict[str, Any]:
    base: dict[str, Any] = {"type": "bytes"}
    if fixed_size is not None:
        base = {"type": "fixed", "name": f"Dec{precision}_{scale}", "size": fixed_size}
    return {**base, "logicalType": "decimal", "precision": precision, "scale": scale}


def logical(base: str, name: str) -> dict[str, Any]:
    return {"type": base, "logicalType": name}


DATE = logical("int", "date")
TS = logical("long", "timestamp-micros")
TS_MILLIS = logical("long", "timestamp-millis")
LOCAL_TS = logical("long", "local-timestamp-micros")
UUID = logical("string", "uuid")
ID = fld("id", "long")


def op(
    kind: SchemaOperationKind, *path: str, type_json: Any = None, **extra: Any
) -> SchemaOperation:
    dumped = None if type_json is None else json.dumps(type_json, sort_keys=True)
    return SchemaOperation(kind=kind, path=tuple(path), type_json=dumped, **extra)


def change_record(
    row_fields: list[dict[str, Any]],
    key_fields: list[dict[str, Any]],
    key: list[str] | None = None,
) -> dict[str, Any]:
    """A normalized change-record value schema, shaped as contracts/avro/change_record.v2.avsc."""
    return {
        "type": "record",
        "name": "OrdersChange",
        "namespace": "io.icefjord.changes.shop",
        "icefjord.table": "shop.orders",
        "icefjord.key": key if key is not None else [f["name"] for f in key_fields],
        "fields": [
            fld(
                "op",
                {
                    "type": "enum",
                    "name": "Operation",
                    "namespace": "io.icefjord",
                    "symbols": ["CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE"],
                },
            ),
            fld("position", "string"),
            fld("source_ts_ms", "long"),
            nullable("tx_id", "string"),
            fld("source", {"type": "map", "values": "string"}),
            fld("key", record("OrdersKey", *key_fields)),
            nullable("after", record("OrdersRow", *row_fields)),
        ],
    }


ADDRESS = record("Address", fld("street", "string"))
ADDRESS_ZIP = record("Address", fld("street", "string"), nullable("zip", "string"))
LINE = record("Line", fld("qty", "int"))
LINE_SKU = record("Line", fld("qty", "int"), nullable("sku", "string"))

# (id, old fields, new fields, expected operations in order)
SAFE_CASES: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], list[SchemaOperation]]] = [
    (
        "add nullable column",
        [ID],
        [ID, nullable("email", "string", doc="contact")],
        [op(ADD, "email", type_json=["null", "string"], doc="contact")],
    ),
    (
        "add required column with default",
        [ID],
        [ID, fld("score", "int", default=0)],
        [op(ADD, "score", type_json="int")],
    ),
    (
        "add nullable struct",
        [ID],
        [ID, nullable("address", ADDRESS)],
        [op(ADD, "address", type_json=["null", ADDRESS])],
    ),
    (
        "nested add in required struct",
        [ID, fld("address", ADDRESS)],
        [ID, fld("address", ADDRESS_ZIP)],
        [op(ADD, "address", "zip", type_json=["null", "string"])],
    ),
    (
        "nested add in nullable struct",
        [ID, nullable("address", ADDRESS)],
        [ID, nullable("address", ADDRESS_ZIP)],
        [op(ADD, "address", "zip", type_json=["null", "string"])],
    ),
    (
        "nested add in array of records",
        [ID, fld("lines", {"type": "array", "items": LINE})],
        [ID, fld("lines", {"type": "array", "items": LINE_SKU})],
        [op(ADD, "lines", "element", "sku", type_json=["null", "string"])],
    ),
    (
        "nested add in map of records",
        [ID, fld("by_sku", {"type": "map", "values": LINE})],
        [ID, fld("by_sku", {"type": "map", "values": LINE_SKU})],
        [op(ADD, "by_sku", "value", "sku", type_json=["null", "string"])],
    ),
    (
        "widen int to long",
        [fld("n", "int")],
        [fld("n", "long")],
        [op(WIDEN, "n", type_json="long")],
    ),
    (
        "widen float to double",
        [fld("x", "float")],
        [fld("x", "double")],
        [op(WIDEN, "x", type_json="double")],
    ),
    (
        "widen nullable int keeps optionality out of the type",
        [nullable("n", "int")],
        [nullable("n", "long")],
        [op(WIDEN, "n", type_json="long")],
    ),
    (
        "decimal precision up, bytes",
        [fld("price", dec(10, 2))],
        [fld("price", dec(12, 2))],
        [op(WIDEN, "price", type_json=dec(12, 2))],
    ),
    (
        "decimal precision up, fixed",
        [fld("price", dec(9, 2, fixed_size=8))],
        [fld("price", dec(18, 2, fixed_size=8))],
        [op(WIDEN, "price", type_json=dec(18, 2, fixed_size=8))],
    ),
    (
        "required to optional",
        [fld("name", "string")],
        [nullable("name", "string")],
        [op(OPTIONAL, "name")],
    ),
    (
        "required int to optional long: make optional, then widen",
        [fld("n", "int")],
        [nullable("n", "long")],
        [op(OPTIONAL, "n"), op(WIDEN, "n", type_json="long")],
    ),
    (
        "array element widened",
        [fld("tags", {"type": "array", "items": "int"})],
        [fld("tags", {"type": "array", "items": "long"})],
        [op(WIDEN, "tags", "element", type_json="long")],
    ),
    (
        "array element made optional",
        [fld("tags", {"type": "array", "items": "string"})],
        [fld("tags", {"type": "array", "items": ["null", "string"]})],
        [op(OPTIONAL, "tags", "element")],
    ),
    (
        "rename through alias",
        [ID, nullable("email", "string")],
        [ID, nullable("mail", "string", aliases=["email"])],
        [op(RENAME, "email", new_name="mail")],
    ),
    (
        "rename through one of several aliases",
        [nullable("email", "string")],
        [nullable("mail", "string", aliases=["e_mail", "email"])],
        [op(RENAME, "email", new_name="mail")],
    ),
    (
        "rename of a struct, then add under its old path",
        [fld("address", ADDRESS)],
        [fld("addr", ADDRESS_ZIP, aliases=["address"])],
        [
            op(RENAME, "address", new_name="addr"),
            op(ADD, "address", "zip", type_json=["null", "string"]),
        ],
    ),
    (
        "rename nested field",
        [fld("address", ADDRESS)],
        [fld("address", record("Address", fld("road", "string", aliases=["street"])))],
        [op(RENAME, "address", "street", new_name="road")],
    ),
    ("soft drop", [ID, fld("legacy", "int")], [ID], [op(DROP, "legacy")]),
    (
        "soft drop of a nested field",
        [fld("address", ADDRESS_ZIP)],
        [fld("address", ADDRESS)],
        [op(DROP, "address", "zip")],
    ),
    (
        "a dropped struct is one drop, not one per child",
        [ID, fld("address", ADDRESS_ZIP)],
        [ID],
        [op(DROP, "address")],
    ),
    (
        "drops come last, parents before children",
        [fld("a", ADDRESS_ZIP), fld("gone", "int")],
        [fld("a", ADDRESS), nullable("b", "int")],
        [op(ADD, "b", type_json=["null", "int"]), op(DROP, "gone"), op(DROP, "a", "zip")],
    ),
    (
        "parents before children, in new field order",
        [fld("x", LINE), fld("y", "int")],
        [fld("y", "long"), nullable("x", LINE_SKU)],
        [
            op(WIDEN, "y", type_json="long"),
            op(OPTIONAL, "x"),
            op(ADD, "x", "sku", type_json=["null", "string"]),
        ],
    ),
    ("unchanged logical type", [fld("at", TS)], [fld("at", TS)], []),
    ("doc-only change", [fld("n", "int", doc="old")], [fld("n", "int", doc="new")], []),
    ("default-only change", [fld("n", "int", default=1)], [fld("n", "int", default=2)], []),
    (
        "field order change",
        [fld("a", "int"), fld("b", "int")],
        [fld("b", "int"), fld("a", "int")],
        [],
    ),
    (
        "enum symbol added",
        [fld("state", {"type": "enum", "name": "State", "symbols": ["A"]})],
        [fld("state", {"type": "enum", "name": "State", "symbols": ["A", "B"]})],
        [],
    ),
    (
        "json semantic marker only",
        [fld("payload", "string")],
        [fld("payload", {"type": "string", "icefjord.semantic": "json"})],
        [],
    ),
    (
        "nested record type renamed",
        [fld("address", ADDRESS)],
        [fld("address", {**ADDRESS, "name": "PostalAddress"})],
        [],
    ),
    (
        "decimal bytes to fixed, same precision and scale",
        [fld("price", dec(9, 2))],
        [fld("price", dec(9, 2, fixed_size=8))],
        [],
    ),
]


@pytest.mark.parametrize(
    ("old_fields", "new_fields", "expected"),
    [case[1:] for case in SAFE_CASES],
    ids=[case[0] for case in SAFE_CASES],
)
def test_safe_change_is_applied_with_exact_operations(
    old_fields: list[dict[str, Any]],
    new_fields: list[dict[str, Any]],
    expected: list[SchemaOperation],
) -> None:
    plan = plan_evolution(row(*old_fields), row(*new_fields))

    assert plan == EvolutionPlan(Verdict.APPLY, tuple(expected), ())


# (id, old fields, new fields, substrings the single reason must contain)
UNSAFE_CASES: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], list[str]]] = [
    ("long to int", [fld("n", "long")], [fld("n", "int")], ["'n'", "narrowing", "long -> int"]),
    ("double to float", [fld("x", "double")], [fld("x", "float")], ["'x'", "double -> float"]),
    (
        "decimal precision down",
        [fld("p", dec(10, 2))],
        [fld("p", dec(8, 2))],
        ["'p'", "narrowing", "decimal(10,2) -> decimal(8,2)"],
    ),
    (
        "decimal scale up",
        [fld("p", dec(10, 2))],
        [fld("p", dec(12, 4))],
        ["'p'", "scale", "decimal(10,2) -> decimal(12,4)"],
    ),
    (
        "decimal scale down",
        [fld("p", dec(10, 2))],
        [fld("p", dec(10, 0))],
        ["scale", "decimal(10,2) -> decimal(10,0)"],
    ),
    ("int to date", [fld("d", "int")], [fld("d", DATE)], ["'d'", "int -> date", "families"]),
    ("date to int", [fld("d", DATE)], [fld("d", "int")], ["date -> int"]),
    ("long to timestamp", [fld("t", "long")], [fld("t", TS)], ["long -> timestamp-micros"]),
    (
        "timestamp to local timestamp",
        [fld("t", TS)],
        [fld("t", LOCAL_TS)],
        ["timestamp-micros -> local-timestamp-micros"],
    ),
    (
        "timestamp millis to micros",
        [fld("t", TS_MILLIS)],
        [fld("t", TS)],
        ["timestamp-millis -> timestamp-micros"],
    ),
    ("string to uuid", [fld("u", "string")], [fld("u", UUID)], ["string -> uuid"]),
    ("int to string", [fld("n", "int")], [fld("n", "string")], ["int -> string"]),
    (
        "int to double is not an Iceberg promotion",
        [fld("n", "int")],
        [fld("n", "double")],
        ["int -> double"],
    ),
    ("record to string", [fld("a", ADDRESS)], [fld("a", "string")], ["record -> string"]),
    (
        "fixed size change",
        [fld("f", {"type": "fixed", "name": "F", "size": 4})],
        [fld("f", {"type": "fixed", "name": "F", "size": 8})],
        ["fixed(4) -> fixed(8)"],
    ),
    (
        "optional to required",
        [nullable("name", "string")],
        [fld("name", "string")],
        ["'name'", "optional string -> required string"],
    ),
    (
        "new required field without default",
        [ID],
        [ID, fld("code", "string")],
        ["'code'", "required", "no default"],
    ),
    (
        "new required field nested in an existing struct",
        [fld("address", ADDRESS)],
        [fld("address", record("Address", fld("street", "string"), fld("zip", "string")))],
        ["'address.zip'", "no default"],
    ),
    (
        "nested narrowing names the path",
        [fld("a", record("A", fld("b", "long")))],
        [fld("a", record("A", fld("b", "int")))],
        ["'a.b'", "long -> int"],
    ),
    (
        "array element narrowing names the element",
        [fld("tags", {"type": "array", "items": "long"})],
        [fld("tags", {"type": "array", "items": "int"})],
        ["'tags.element'", "long -> int"],
    ),
    (
        "new field of a multi-type union",
        [ID],
        [ID, nullable("v", "string") | {"type": ["null", "string", "long"]}],
        ["'v'", "union"],
    ),
    (
        "aliases matching two old fields",
        [fld("a", "int"), fld("b", "int")],
        [fld("c", "int", aliases=["a", "b"])],
        ["'c'", "several old fields"],
    ),
    (
        "two new fields claiming the same old field",
        [fld("a", "int")],
        [fld("b", "int", aliases=["a"]), fld("c", "int", aliases=["a"])],
        ["'b'", "'c'", "'a'", "claim"],
    ),
]


@pytest.mark.parametrize(
    ("old_fields", "new_fields", "fragments"),
    [case[1:] for case in UNSAFE_CASES],
    ids=[case[0] for case in UNSAFE_CASES],
)
def test_unsafe_change_is_quarantined_with_reason(
    old_fields: list[dict[str, Any]], new_fields: list[dict[str, Any]], fragments: list[str]
) -> None:
    plan = plan_evolution(row(*old_fields), row(*new_fields))

    assert plan.verdict is Verdict.QUARANTINE
    assert len(plan.reasons) == 1, plan.reasons
    for fragment in fragments:
        assert fragment in plan.reasons[0]


def test_quarantine_still_lists_the_safe_operations_for_the_operator() -> None:
    plan = plan_evolution(
        row(fld("n", "long"), fld("m", "int")),
        row(fld("n", "int"), fld("m", "long"), nullable("extra", "string")),
    )

    assert plan.verdict is Verdict.QUARANTINE
    assert [o.kind for o in plan.operations] == [WIDEN, ADD]
    assert plan.reason == plan.reasons[0]


def test_every_unsafe_change_is_reported_not_only_the_first() -> None:
    plan = plan_evolution(
        row(fld("a", "long"), nullable("b", "int"), fld("c", dec(5, 1))),
        row(fld("a", "int"), fld("b", "int"), fld("c", dec(5, 2))),
    )

    assert plan.verdict is Verdict.QUARANTINE
    assert len(plan.reasons) == 3
    assert plan.reason is not None and plan.reason.count("; ") == 2


def test_first_version_is_applied_without_operations() -> None:
    plan = plan_evolution(None, row(ID, nullable("email", "string")))

    assert plan == EvolutionPlan(Verdict.APPLY)


def test_first_version_that_is_malformed_is_quarantined() -> None:
    plan = plan_evolution(None, {"type": "record", "fields": []})

    assert plan.verdict is Verdict.QUARANTINE


MALFORMED: list[tuple[str, Any]] = [
    ("not an object", ["null", "string"]),
    ("not a record", {"type": "string"}),
    ("record without name", {"type": "record", "fields": [ID]}),
    ("field without name", row({"type": "int"})),
    ("unknown type name", row(fld("a", "Nope"))),
    ("decimal scale above precision", row(fld("p", dec(3, 5)))),
    ("decimal without precision", row(fld("p", {"type": "bytes", "logicalType": "decimal"}))),
    ("duplicate field names", row(fld("a", "int"), fld("a", "long"))),
    ("recursive record", row(nullable("next", "io.icefjord.rows.Row"))),
    ("bad default", row(fld("a", "int", default="x"))),
    ("aliases not a list of strings", row(fld("a", "int", aliases="b"))),
    ("array without items", row(fld("a", {"type": "array"}))),
]


@pytest.mark.parametrize("schema", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
@pytest.mark.parametrize("side", ["old", "new"])
def test_malformed_schema_is_quarantined_never_raised(schema: Any, side: str) -> None:
    good = row(ID)
    old, new = (schema, good) if side == "old" else (good, schema)

    plan = plan_evolution(old, new)

    assert plan.verdict is Verdict.QUARANTINE
    assert plan.operations == ()
    assert len(plan.reasons) == 1
    assert plan.reasons[0].startswith(f"{side} schema")
    assert "internal error" not in plan.reasons[0]


# --- full change records: the row is diffed, the key must not move --------------------------

KEY_ID = [fld("id", "long")]
ROW_ID = [fld("id", "long"), nullable("email", "string")]


def test_change_record_diffs_the_after_row() -> None:
    old = change_record(ROW_ID, KEY_ID)
    new = change_record([*ROW_ID, nullable("phone", "string")], KEY_ID)

    plan = plan_evolution(old, new)

    assert plan == EvolutionPlan(
        Verdict.APPLY, (op(ADD, "phone", type_json=["null", "string"]),), ()
    )


def test_change_record_envelope_fields_are_not_row_columns() -> None:
    old = change_record(ROW_ID, KEY_ID)
    new = change_record(ROW_ID, KEY_ID)
    new["fields"][3] = nullable("tx_id", "long")

    assert plan_evolution(old, new) == EvolutionPlan(Verdict.APPLY)


def test_row_may_reference_named_types_defined_in_the_key() -> None:
    guid = {"type": "fixed", "name": "Guid", "size": 16}
    old = change_record([fld("id", "Guid")], [fld("id", guid)])
    new = change_record([fld("id", "Guid"), nullable("ref", "Guid")], [fld("id", guid)])

    plan = plan_evolution(old, new)

    assert plan.verdict is Verdict.APPLY
    assert [o.path for o in plan.operations] == [("ref",)]
    inlined = json.loads(plan.operations[0].type_json or "null")
    assert inlined[1]["size"] == 16


KEY_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "key column added",
        change_record([*ROW_ID, fld("region", "string")], [*KEY_ID, fld("region", "string")]),
        ["key columns changed", "'region'"],
    ),
    (
        "key column removed",
        change_record(ROW_ID, [], key=[]),
        ["key columns changed", "['id'] to []"],
    ),
    (
        "key column renamed through alias",
        change_record(
            [fld("order_id", "long", aliases=["id"]), nullable("email", "string")],
            [fld("order_id", "long", aliases=["id"])],
        ),
        ["key columns changed", "'order_id'", "RENAME_COLUMN"],
    ),
    (
        "key column made optional in the row",
        change_record([nullable("id", "long"), nullable("email", "string")], KEY_ID),
        ["'id'", "MAKE_OPTIONAL"],
    ),
]


def test_key_type_change_is_quarantined() -> None:
    old = change_record([fld("id", "int")], [fld("id", "int")])
    new = change_record([fld("id", "long")], [fld("id", "long")])

    plan = plan_evolution(old, new)

    assert plan.verdict is Verdict.QUARANTINE
    assert any("key column 'id' changed type" in r for r in plan.reasons)
    assert any("WIDEN_TYPE" in r for r in plan.reasons)


def test_key_order_change_is_quarantined() -> None:
    key = [fld("a", "long"), fld("b", "long")]
    old = change_record(key, key, key=["a", "b"])
    new = change_record(key, key, key=["b", "a"])

    plan = plan_evolution(old, new)

    assert plan.verdict is Verdict.QUARANTINE
    assert plan.reasons == ("key columns changed from ['a', 'b'] to ['b', 'a']",)


@pytest.mark.parametrize(
    ("new", "fragments"),
    [case[1:] for case in KEY_CASES],
    ids=[case[0] for case in KEY_CASES],
)
def test_key_change_is_quarantined(new: dict[str, Any], fragments: list[str]) -> None:
    plan = plan_evolution(change_record(ROW_ID, KEY_ID), new)

    assert plan.verdict is Verdict.QUARANTINE
    joined = " | ".join(plan.reasons)
    for fragment in fragments:
        assert fragment in joined


def test_key_property_and_key_record_must_agree() -> None:
    new = change_record(ROW_ID, KEY_ID, key=["email"])

    plan = plan_evolution(change_record(ROW_ID, KEY_ID), new)

    assert plan.verdict is Verdict.QUARANTINE
    assert "does not match the key record" in plan.reasons[0]


def test_change_record_against_bare_row_is_quarantined() -> None:
    plan = plan_evolution(change_record(ROW_ID, KEY_ID), row(*ROW_ID))

    assert plan.verdict is Verdict.QUARANTINE
    assert "bare row" in plan.reasons[0]


def test_plan_json_uses_wire_names() -> None:
    plan = plan_evolution(
        row(fld("email", "string")), row(fld("mail", "string", aliases=["email"]))
    )

    assert plan.to_json() == {
        "verdict": "APPLY",
        "operations": [
            {
                "kind": "RENAME_COLUMN",
                "path": ["email"],
                "type_json": None,
                "new_name": "mail",
                "doc": None,
            }
        ],
        "reasons": [],
    }
