"""The change_record example has the shape every generated change record must have."""

from __future__ import annotations

from typing import Any

import pytest
from fastavro.schema import expand_schema

from contracts import load_schema, schema_versions

pytestmark = pytest.mark.unit

VERSIONS = schema_versions("change_record")
ENVELOPE = ["op", "position", "source_ts_ms", "tx_id", "source", "key", "after", "unchanged"]


def _schema(version: int) -> dict[str, Any]:
    return load_schema("change_record", version)


def _fields(record: dict[str, Any]) -> dict[str, Any]:
    return {field["name"]: field for field in record["fields"]}


def _row(schema: dict[str, Any]) -> dict[str, Any]:
    after = _fields(expand_schema(schema))["after"]["type"]
    assert after[0] == "null"
    row: dict[str, Any] = after[1]
    return row


@pytest.mark.parametrize("version", VERSIONS)
def test_carries_table_and_key_properties(version: int) -> None:
    schema = _schema(version)
    namespace, _, table = schema["icefjord.table"].partition(".")
    assert namespace and table
    assert schema["namespace"] == f"io.icefjord.changes.{namespace}"
    assert schema["name"] == table.title().replace("_", "") + "Change"
    assert isinstance(schema["icefjord.key"], list) and schema["icefjord.key"]


@pytest.mark.parametrize("version", VERSIONS)
def test_key_columns_are_the_key_record_and_exist_in_the_row(version: int) -> None:
    schema = _schema(version)
    key_record = _fields(expand_schema(schema))["key"]["type"]
    key_columns = schema["icefjord.key"]
    assert [field["name"] for field in key_record["fields"]] == key_columns
    row_fields = _fields(_row(schema))
    for field in key_record["fields"]:
        assert field["name"] in row_fields
        assert row_fields[field["name"]]["type"] == field["type"]
        assert not isinstance(field["type"], list), "key columns are never nullable"


@pytest.mark.parametrize("version", VERSIONS)
def test_envelope_fields_are_the_fixed_ones(version: int) -> None:
    fields = _fields(expand_schema(_schema(version)))
    assert list(fields) == ENVELOPE
    op = fields["op"]["type"]
    assert op["name"] == "io.icefjord.Operation"
    assert op["symbols"] == ["CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE"]
    assert fields["position"]["type"] == "string"
    assert fields["source_ts_ms"]["type"] == "long"
    assert fields["tx_id"]["type"] == ["null", "string"]
    assert fields["tx_id"]["default"] is None
    assert fields["unchanged"]["type"] == ["null", {"type": "array", "items": "string"}]
    assert fields["unchanged"]["default"] is None
    assert fields["source"]["type"] == {"type": "map", "values": "string"}
    assert fields["after"]["default"] is None


def _nullable_fields(record: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for field in record["fields"]:
        if isinstance(field["type"], list):
            found.append(field)
            found += [
                nested
                for branch in field["type"]
                if isinstance(branch, dict) and branch.get("type") == "record"
                for nested in _nullable_fields(branch)
            ]
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_optional_columns_are_null_first_with_a_null_default(version: int) -> None:
    nullable = _nullable_fields(_row(_schema(version)))
    assert nullable
    for field in nullable:
        assert field["type"][0] == "null", field["name"]
        assert "default" in field and field["default"] is None, field["name"]


def _types(node: Any) -> list[Any]:
    if isinstance(node, list):
        return [t for branch in node for t in _types(branch)]
    if isinstance(node, str):
        return [node]
    nested = [f["type"] for f in node.get("fields", [])] + [node.get("items")]
    return [node, *[t for child in nested if child is not None for t in _types(child)]]


def test_v1_example_shows_every_kind_of_column() -> None:
    row_types = _types(_row(_schema(1)))
    logical = {t.get("logicalType") for t in row_types if isinstance(t, dict)}
    assert {
        "decimal",
        "date",
        "timestamp-micros",
        "local-timestamp-micros",
        "uuid",
    } <= logical
    kinds = {t.get("type") for t in row_types[1:] if isinstance(t, dict)}
    assert {"record", "array"} <= kinds
    assert any(isinstance(t, dict) and t.get("icefjord.semantic") == "json" for t in row_types)


def test_v2_renames_through_an_alias() -> None:
    v1_names = set(_fields(_row(_schema(1))))
    v2_fields = _fields(_row(_schema(2)))
    renamed = [f for f in v2_fields.values() if f.get("aliases")]
    assert renamed
    for field in renamed:
        assert field["name"] not in v1_names
        assert set(field["aliases"]) & v1_names
