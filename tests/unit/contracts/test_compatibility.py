"""Every schema version reads all data of the earlier ones (BACKWARD, transitively).

Two independent checks per pair: real Avro schema resolution in fastavro over generated data,
and contracts.compat.backward_violations for the rules resolution alone does not catch. The
same harness runs on deliberate good and bad edits of the control schema, so it is shown to
fail when it should.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

import fastavro
import pytest
from fastavro.read import SchemaResolutionError
from hypothesis import Phase, given, settings

from contracts import load_schema, schema_names, schema_versions
from contracts.compat import backward_violations

pytestmark = pytest.mark.unit

PAIRS = [
    (name, old, new)
    for name in schema_names()
    for old, new in itertools.combinations(schema_versions(name), 2)
]


def assert_reads_old_data(
    avro: Any, old: dict[str, Any], new: dict[str, Any], *, expect_failure: bool = False
) -> None:
    """Data written with ``old`` is readable with reader ``new`` and valid under ``new``.

    ``expect_failure=True`` is for tests that expect this to raise: more examples, drawn
    deterministically, and no time spent minimising the failure.
    """
    parsed_new = fastavro.parse_schema(new)
    phases = (Phase.generate,) if expect_failure else tuple(Phase)

    @settings(
        max_examples=300 if expect_failure else 60,
        derandomize=expect_failure,
        phases=phases,
        deadline=None,
        database=None,
    )
    @given(avro.values(old))
    def check(value: Any) -> None:
        resolved = avro.read(avro.write(old, value), old, new)
        fastavro.validate(_strip_record_names(resolved), parsed_new, strict=False)

    check()


def _strip_record_names(value: Any) -> Any:
    """Turn return_record_name tuples back into plain records for validation."""
    if isinstance(value, tuple):
        return _strip_record_names(value[1])
    if isinstance(value, dict):
        return {key: _strip_record_names(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_strip_record_names(item) for item in value]
    return value


@pytest.mark.parametrize(("name", "old", "new"), PAIRS)
def test_later_versions_read_earlier_data(avro: Any, name: str, old: int, new: int) -> None:
    assert_reads_old_data(avro, load_schema(name, old), load_schema(name, new))


@pytest.mark.parametrize(("name", "old", "new"), PAIRS)
def test_later_versions_follow_the_written_rules(name: str, old: int, new: int) -> None:
    assert backward_violations(load_schema(name, old), load_schema(name, new)) == []


def test_the_change_record_example_exercises_the_pair_harness() -> None:
    assert ("change_record", 1, 2) in PAIRS


# --- the harness on deliberate edits of the control schema ---------------------------------

BASE = load_schema("control_event", 1)  # the edits below were drawn up against v1


def _payload(schema: dict[str, Any], name: str) -> dict[str, Any]:
    union = next(f for f in schema["fields"] if f["name"] == "payload")["type"]
    return next(branch for branch in union if branch["name"] == name)


def _field(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in record["fields"] if f["name"] == name)


def _edited(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    schema = copy.deepcopy(BASE)
    edit(schema)
    return schema


def _add_commit_field(schema: dict[str, Any]) -> None:
    _payload(schema, "CommitDone")["fields"].append(
        {"name": "rows_skipped", "type": ["null", "long"], "default": None}
    )


def _append_status(schema: dict[str, Any]) -> None:
    _field(_payload(schema, "MaintenanceResult"), "status")["type"]["symbols"].append("PARTIAL")


def _append_payload_type(schema: dict[str, Any]) -> None:
    union = next(f for f in schema["fields"] if f["name"] == "payload")["type"]
    union.append(
        {"type": "record", "name": "TableDropped", "fields": [{"name": "table", "type": "string"}]}
    )


def _rename_with_alias(schema: dict[str, Any]) -> None:
    field = _field(_payload(schema, "OperatorCommand"), "requested_by")
    field["name"], field["aliases"] = "issued_by", ["requested_by"]


def _rename_payload_type_with_alias(schema: dict[str, Any]) -> None:
    record = _payload(schema, "OperatorCommand")
    record["name"], record["aliases"] = "OperatorOrder", ["OperatorCommand"]


def _widen_partition(schema: dict[str, Any]) -> None:
    _field(_payload(schema, "CommitDone"), "data_files_added")["type"] = "long"


GOOD_EDITS = [
    _add_commit_field,
    _append_status,
    _append_payload_type,
    _rename_with_alias,
    _widen_partition,
    _rename_payload_type_with_alias,
]


@pytest.mark.parametrize("edit", GOOD_EDITS, ids=lambda edit: edit.__name__)
def test_allowed_edits_pass_both_checks(avro: Any, edit: Callable[[dict[str, Any]], None]) -> None:
    new = _edited(edit)
    assert backward_violations(BASE, new) == []
    assert_reads_old_data(avro, BASE, new)


def _add_required_field(schema: dict[str, Any]) -> None:
    _payload(schema, "CommitDone")["fields"].append({"name": "rows_skipped", "type": "long"})


def _narrow_type(schema: dict[str, Any]) -> None:
    _field(_payload(schema, "CommitDone"), "bytes_added")["type"] = "int"


def _change_type(schema: dict[str, Any]) -> None:
    _field(schema, "produced_at_ms")["type"] = "string"


def _remove_enum_symbol(schema: dict[str, Any]) -> None:
    _field(_payload(schema, "OperatorCommand"), "command")["type"]["symbols"].remove("FLUSH")


def _rename_without_alias(schema: dict[str, Any]) -> None:
    _field(_payload(schema, "OperatorCommand"), "requested_by")["name"] = "issued_by"


def _remove_required_field(schema: dict[str, Any]) -> None:
    record = _payload(schema, "CommitDone")
    record["fields"] = [f for f in record["fields"] if f["name"] != "writer_epoch"]


def _reorder_enum(schema: dict[str, Any]) -> None:
    _field(_payload(schema, "MaintenanceResult"), "status")["type"]["symbols"].reverse()


def _drop_enum_default(schema: dict[str, Any]) -> None:
    del _field(_payload(schema, "MaintenanceResult"), "status")["type"]["default"]


def _insert_payload_type_first(schema: dict[str, Any]) -> None:
    union = next(f for f in schema["fields"] if f["name"] == "payload")["type"]
    union.insert(
        0,
        {"type": "record", "name": "TableDropped", "fields": [{"name": "table", "type": "string"}]},
    )


def _rename_payload_type(schema: dict[str, Any]) -> None:
    _payload(schema, "OperatorCommand")["name"] = "OperatorOrder"


def _null_default_not_first(schema: dict[str, Any]) -> None:
    _payload(schema, "CommitDone")["fields"].append(
        {"name": "rows_skipped", "type": ["long", "null"], "default": None}
    )


# (edit, text the violation must contain, whether fastavro resolution also fails on it)
BAD_EDITS = [
    (_add_required_field, "rows_skipped: field added without a default", True),
    (_narrow_type, "bytes_added: type changed from long to int", True),
    (_change_type, "produced_at_ms: type changed from long to string", True),
    (_remove_enum_symbol, "command: enum symbols", True),
    (_rename_without_alias, "issued_by: field added without a default", True),
    (_rename_payload_type, "payload: union branch", True),
    (_remove_required_field, "writer_epoch: field without a default removed", False),
    (_reorder_enum, "status: enum symbols", False),
    (_drop_enum_default, "status: enum default FAILED dropped", False),
    (_insert_payload_type_first, "payload: union branches", False),
    (_null_default_not_first, "rows_skipped: default null but first type is not null", None),
]


@pytest.mark.parametrize(
    ("edit", "violation", "resolution_fails"), BAD_EDITS, ids=[e[0].__name__ for e in BAD_EDITS]
)
def test_forbidden_edits_are_flagged(
    avro: Any, edit: Callable[[dict[str, Any]], None], violation: str, resolution_fails: bool | None
) -> None:
    new = _edited(edit)
    violations = backward_violations(BASE, new)
    assert any(violation in v for v in violations), violations
    if resolution_fails is None:
        return
    if resolution_fails:
        with pytest.raises(SchemaResolutionError):
            assert_reads_old_data(avro, BASE, new, expect_failure=True)
    else:
        assert_reads_old_data(avro, BASE, new)


def test_widening_and_making_optional_in_nested_types_are_allowed() -> None:
    old = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "xs", "type": {"type": "array", "items": "int"}},
            {"name": "m", "type": {"type": "map", "values": "float"}},
            {
                "name": "d",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
            },
            {"name": "s", "type": "string"},
        ],
    }
    new = copy.deepcopy(old)
    new["fields"][0]["type"]["items"] = "long"
    new["fields"][1]["type"]["values"] = "double"
    new["fields"][2]["type"]["precision"] = 9
    new["fields"][3]["type"] = ["null", "string"]
    assert backward_violations(old, new) == []
    assert backward_violations(new, old) != []


def test_logical_type_and_decimal_scale_changes_are_flagged() -> None:
    old = {
        "type": "record",
        "name": "R",
        "fields": [
            {
                "name": "d",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
            },
            {"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ],
    }
    new = copy.deepcopy(old)
    new["fields"][0]["type"]["scale"] = 3
    new["fields"][1]["type"]["logicalType"] = "local-timestamp-micros"
    violations = backward_violations(old, new)
    assert any("d: decimal scale changed" in v for v in violations), violations
    assert any("t: logical type changed" in v for v in violations), violations
