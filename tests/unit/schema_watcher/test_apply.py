"""apply_plan and the Iceberg-level schema equivalence it is judged by."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from services.schema_watcher import (
    EvolutionPlan,
    SchemaOperation,
    SchemaOperationKind,
    Verdict,
    apply_plan,
    normalize_row_schema,
    plan_evolution,
    schemas_equivalent,
)

pytestmark = pytest.mark.unit


def row(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Row", "fields": list(fields)}


def fld(name: str, avro_type: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": avro_type, **extra}


ADDRESS = {"type": "record", "name": "Address", "fields": [fld("street", "string")]}


def field_named(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in schema["fields"] if f["name"] == name)


def test_rename_keeps_the_old_name_as_alias() -> None:
    old = row(fld("email", "string"))
    plan = EvolutionPlan(
        Verdict.APPLY,
        (
            SchemaOperation(
                kind=SchemaOperationKind.RENAME_COLUMN, path=("email",), new_name="mail"
            ),
        ),
    )

    applied = apply_plan(old, plan)

    assert applied["fields"] == [{"name": "mail", "type": "string", "aliases": ["email"]}]


def test_children_of_a_renamed_parent_are_found_by_their_old_path() -> None:
    old = row(fld("address", ADDRESS))
    zip_type = json.dumps(["null", "string"])
    plan = EvolutionPlan(
        Verdict.APPLY,
        (
            SchemaOperation(
                kind=SchemaOperationKind.RENAME_COLUMN, path=("address",), new_name="addr"
            ),
            SchemaOperation(
                kind=SchemaOperationKind.ADD_COLUMN, path=("address", "zip"), type_json=zip_type
            ),
            SchemaOperation(
                kind=SchemaOperationKind.RENAME_COLUMN, path=("address", "street"), new_name="road"
            ),
        ),
    )

    applied = apply_plan(old, plan)

    addr = field_named(applied, "addr")["type"]
    assert [f["name"] for f in addr["fields"]] == ["road", "zip"]
    assert field_named(addr, "zip") == {"name": "zip", "type": ["null", "string"], "default": None}


def test_soft_drop_keeps_the_column_optional_and_deprecated() -> None:
    old = row(fld("id", "long"), fld("legacy", "int", default=3))
    plan = EvolutionPlan(
        Verdict.APPLY,
        (SchemaOperation(kind=SchemaOperationKind.SOFT_DROP_COLUMN, path=("legacy",)),),
    )

    applied = apply_plan(old, plan)

    assert field_named(applied, "legacy") == {
        "name": "legacy",
        "type": ["null", "int"],
        "default": None,
        "icefjord.deprecated": True,
    }


def test_widen_keeps_optionality() -> None:
    old = row(fld("n", ["null", "int"], default=None))
    plan = EvolutionPlan(
        Verdict.APPLY,
        (SchemaOperation(kind=SchemaOperationKind.WIDEN_TYPE, path=("n",), type_json='"long"'),),
    )

    assert apply_plan(old, plan)["fields"][0]["type"] == ["null", "long"]


def test_widen_and_make_optional_inside_an_array() -> None:
    old = row(fld("tags", {"type": "array", "items": "int"}))
    plan = plan_evolution(old, row(fld("tags", {"type": "array", "items": ["null", "long"]})))

    applied = apply_plan(old, plan)

    assert applied["fields"][0]["type"] == {"type": "array", "items": ["null", "long"]}


def test_the_input_schema_is_not_modified() -> None:
    old = row(fld("address", ADDRESS), fld("gone", "int"))
    before = copy.deepcopy(old)
    new = row(fld("addr", ADDRESS | {"fields": []}, aliases=["address"]))

    apply_plan(old, plan_evolution(old, new))

    assert old == before


def test_a_change_record_is_applied_to_its_row() -> None:
    after = {"type": "record", "name": "R", "fields": [fld("id", "long")]}
    old = {
        "type": "record",
        "name": "RChange",
        "icefjord.key": ["id"],
        "fields": [
            fld("key", {"type": "record", "name": "K", "fields": [fld("id", "long")]}),
            fld("after", ["null", after], default=None),
        ],
    }
    plan = EvolutionPlan(
        Verdict.APPLY,
        (
            SchemaOperation(
                kind=SchemaOperationKind.ADD_COLUMN, path=("x",), type_json='["null", "int"]'
            ),
        ),
    )

    applied = apply_plan(old, plan)

    assert applied["name"] == "R"
    assert [f["name"] for f in applied["fields"]] == ["id", "x"]


def test_quarantined_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="quarantined"):
        apply_plan(row(fld("a", "int")), EvolutionPlan(Verdict.QUARANTINE, reasons=("no",)))


@pytest.mark.parametrize(
    "operation",
    [
        SchemaOperation(kind=SchemaOperationKind.MAKE_OPTIONAL, path=("missing",)),
        SchemaOperation(kind=SchemaOperationKind.ADD_COLUMN, path=("a", "x"), type_json='"int"'),
        SchemaOperation(
            kind=SchemaOperationKind.WIDEN_TYPE, path=("a", "element"), type_json='"long"'
        ),
        SchemaOperation(kind=SchemaOperationKind.RENAME_COLUMN, path=("a",)),
    ],
    ids=["unknown field", "add under a primitive", "element of a non-array", "rename without name"],
)
def test_operation_that_does_not_fit_the_schema_raises(operation: SchemaOperation) -> None:
    with pytest.raises(ValueError):
        apply_plan(row(fld("a", "int")), EvolutionPlan(Verdict.APPLY, (operation,)))


def test_equivalence_ignores_docs_defaults_order_aliases_and_type_names() -> None:
    one = row(fld("a", "int", doc="x"), fld("b", ADDRESS))
    other = row(
        fld("b", ADDRESS | {"name": "Other", "doc": "y"}),
        fld("a", "int", default=7, aliases=["z"]),
    )

    assert schemas_equivalent(one, other)


@pytest.mark.parametrize(
    "other",
    [
        row(fld("a", "long")),
        row(fld("a", ["null", "int"], default=None)),
        row(fld("b", "int")),
        row(fld("a", {"type": "int", "logicalType": "date"})),
        row(fld("a", "int"), fld("c", ["null", "int"], default=None)),
    ],
    ids=["type", "nullability", "name", "logical type", "extra field"],
)
def test_equivalence_sees_iceberg_relevant_differences(other: dict[str, Any]) -> None:
    assert not schemas_equivalent(row(fld("a", "int")), other)


def test_equivalence_leaves_out_soft_dropped_fields_only_when_asked() -> None:
    dropped = row(fld("a", "int"), fld("b", ["null", "int"], **{"icefjord.deprecated": True}))

    assert schemas_equivalent(dropped, row(fld("a", "int")))
    assert normalize_row_schema(dropped) != normalize_row_schema(row(fld("a", "int")))
