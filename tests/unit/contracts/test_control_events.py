"""shared.events against the control_event schema: same shape, lossless round trips."""

from __future__ import annotations

import copy
import dataclasses
import enum
import uuid
from typing import Any

import pytest
from fastavro.schema import expand_schema
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import load_schema, schema_versions
from shared.events import (
    ENUM_FALLBACKS,
    PAYLOAD_TYPES,
    BulkLoad,
    BulkLoadStatus,
    CommitDone,
    ControlEvent,
    MaintenanceAction,
    MaintenanceRequest,
    MaintenanceResult,
    MaintenanceStatus,
    OperatorCommand,
    OperatorCommandKind,
    OperatorCommandResult,
    OperatorCommandStatus,
    SchemaChange,
    SchemaOperation,
    SchemaOperationKind,
    TopicPartitionOffset,
    UnknownEventError,
    Verdict,
)

pytestmark = pytest.mark.unit

SCHEMA = load_schema("control_event")
EXPANDED = expand_schema(SCHEMA)
PAYLOAD_BRANCHES = {
    branch["name"]: branch
    for branch in next(f["type"] for f in EXPANDED["fields"] if f["name"] == "payload")
}
PYTHON_ENUMS: dict[str, type[enum.StrEnum]] = {
    "io.icefjord.control.SchemaOperationKind": SchemaOperationKind,
    "io.icefjord.control.Verdict": Verdict,
    "io.icefjord.control.MaintenanceAction": MaintenanceAction,
    "io.icefjord.control.MaintenanceStatus": MaintenanceStatus,
    "io.icefjord.control.OperatorCommandKind": OperatorCommandKind,
    "io.icefjord.control.BulkLoadStatus": BulkLoadStatus,
    "io.icefjord.control.OperatorCommandStatus": OperatorCommandStatus,
}

# --- strategies ----------------------------------------------------------------------------

longs = st.integers(-(2**63), 2**63 - 1)
ints = st.integers(-(2**31), 2**31 - 1)
texts = st.text(max_size=12)


def opt(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | values


tables = st.from_regex(r"[a-z_]{1,8}\.[a-z_]{1,8}", fullmatch=True)

operations = st.builds(
    SchemaOperation,
    kind=st.sampled_from(SchemaOperationKind),
    path=st.lists(texts, min_size=1, max_size=3).map(tuple),
    type_json=opt(texts),
    new_name=opt(texts),
    doc=opt(texts),
)


def _payloads(table: str) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(
            SchemaChange,
            table=st.just(table),
            subject=texts,
            from_version=opt(ints),
            to_version=ints,
            from_schema_id=opt(ints),
            to_schema_id=ints,
            operations=st.lists(operations, max_size=3).map(tuple),
            verdict=st.sampled_from(Verdict),
            reason=opt(texts),
        ),
        st.builds(
            CommitDone,
            table=st.just(table),
            commit_id=texts,
            snapshot_id=longs,
            writer_epoch=longs,
            records=longs,
            inserted=longs,
            updated=longs,
            deleted=longs,
            data_files_added=ints,
            delete_files_added=ints,
            bytes_added=longs,
            watermark_ms=opt(longs),
            freshness_ms=opt(longs),
            offsets=st.lists(
                st.builds(TopicPartitionOffset, topic=texts, partition=ints, next_offset=longs),
                max_size=3,
            ).map(tuple),
            committed_at_ms=longs,
            duration_ms=longs,
            write_path=opt(texts),
        ),
        st.builds(
            MaintenanceRequest,
            request_id=texts,
            table=st.just(table),
            action=st.sampled_from(MaintenanceAction),
            partition=opt(texts),
            options=st.dictionaries(texts, texts, max_size=3),
            reason=texts,
            requested_by=texts,
        ),
        st.builds(
            MaintenanceResult,
            request_id=texts,
            table=st.just(table),
            action=st.sampled_from(MaintenanceAction),
            status=st.sampled_from(MaintenanceStatus),
            files_before=opt(longs),
            files_after=opt(longs),
            bytes_before=opt(longs),
            bytes_after=opt(longs),
            duration_ms=longs,
            message=opt(texts),
            error=opt(texts),
        ),
        st.builds(
            OperatorCommand,
            command=st.sampled_from(OperatorCommandKind),
            table=st.just(table),
            reason=opt(texts),
            requested_by=texts,
        ),
        st.builds(
            BulkLoad,
            load_id=texts,
            table=st.just(table),
            status=st.sampled_from(BulkLoadStatus),
            files=st.lists(texts, max_size=3).map(tuple),
            rows=opt(longs),
            snapshot_ts_ms=opt(longs),
            reason=opt(texts),
            requested_by=texts,
        ),
        st.builds(
            OperatorCommandResult,
            command_event_id=texts,
            table=st.just(table),
            command=st.sampled_from(OperatorCommandKind),
            status=st.sampled_from(OperatorCommandStatus),
            tables=st.lists(texts, max_size=3).map(tuple),
            records=opt(longs),
            message=opt(texts),
        ),
    )


@st.composite
def control_events(draw: st.DrawFn) -> ControlEvent:
    table = draw(st.one_of(tables, st.just("*")))
    return ControlEvent(
        event_id=str(draw(st.uuids(version=4))),
        table=table,
        produced_at_ms=draw(longs),
        producer=draw(texts),
        payload=draw(_payloads(table)),
    )


# --- round trips ---------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(control_events())
def test_events_round_trip_through_avro(avro: Any, event: ControlEvent) -> None:
    data = avro.write(SCHEMA, event.to_record())
    assert ControlEvent.from_record(avro.read(data, SCHEMA)) == event


@pytest.mark.parametrize("version", schema_versions("control_event"))
def test_every_record_the_schema_allows_maps_to_an_event_and_back(avro: Any, version: int) -> None:
    schema = load_schema("control_event", version)

    @settings(max_examples=200, deadline=None)
    @given(avro.values(schema))
    def check(record: dict[str, Any]) -> None:
        record["table"] = record["payload"][1]["table"]  # the one rule Avro cannot express
        read_back = avro.read(avro.write(schema, record), schema)
        event = ControlEvent.from_record(read_back)
        # Written back with the same version's schema: fields a later version added drop out.
        assert avro.read(avro.write(schema, event.to_record()), schema) == read_back

    check()


def test_one_sample_of_each_payload_type_round_trips(avro: Any) -> None:
    table = "inventory.customers"
    samples = [
        SchemaChange(
            table=table,
            subject="icefjord.changes.inventory.customers-value",
            from_version=1,
            to_version=2,
            from_schema_id=11,
            to_schema_id=12,
            operations=(
                SchemaOperation(
                    kind=SchemaOperationKind.ADD_COLUMN,
                    path=("address", "zip"),
                    type_json='["null","string"]',
                ),
                SchemaOperation(
                    kind=SchemaOperationKind.RENAME_COLUMN, path=("email",), new_name="mail"
                ),
            ),
            verdict=Verdict.APPLY,
        ),
        CommitDone(
            table=table,
            commit_id="c-1",
            snapshot_id=7_000_000_000_000,
            writer_epoch=3,
            records=10,
            inserted=6,
            updated=3,
            deleted=1,
            data_files_added=2,
            delete_files_added=1,
            bytes_added=4096,
            watermark_ms=1_700_000_000_000,
            freshness_ms=2_500,
            offsets=(TopicPartitionOffset(topic="t", partition=0, next_offset=42),),
            committed_at_ms=1_700_000_002_500,
            duration_ms=900,
        ),
        MaintenanceRequest(
            request_id="r-1",
            table=table,
            action=MaintenanceAction.COMPACT_DATA_FILES,
            options={"target-file-size-bytes": "536870912"},
            reason="120 files in partition day=2024-05-01",
            requested_by="maintainer/policy:small-files",
        ),
        MaintenanceResult(
            request_id="r-1",
            table=table,
            action=MaintenanceAction.COMPACT_DATA_FILES,
            status=MaintenanceStatus.SUCCEEDED,
            files_before=120,
            files_after=2,
            duration_ms=30_000,
        ),
        OperatorCommand(command=OperatorCommandKind.PAUSE, table=table, requested_by="op:ana"),
        BulkLoad(
            load_id="load-1",
            table=table,
            status=BulkLoadStatus.READY,
            files=("/w/_bulk/load-1/part-0.parquet",),
            rows=1000,
            snapshot_ts_ms=1_700_000_000_000,
            requested_by="icefjord-bulk",
        ),
        OperatorCommandResult(
            command_event_id="e-1",
            table=table,
            command=OperatorCommandKind.FLUSH,
            status=OperatorCommandStatus.APPLIED,
            tables=(table,),
            records=42,
        ),
    ]
    assert {type(sample) for sample in samples} == set(PAYLOAD_TYPES.values())
    for sample in samples:
        event = ControlEvent.new(table, sample, "test")
        read_back = avro.read(avro.write(SCHEMA, event.to_record()), SCHEMA)
        assert read_back["payload"][0] == type(sample).AVRO_NAME
        assert ControlEvent.from_record(read_back) == event


# --- the dataclasses mirror the schema -----------------------------------------------------


def test_payload_types_are_exactly_the_union_branches() -> None:
    assert set(PAYLOAD_TYPES) == set(PAYLOAD_BRANCHES)


@pytest.mark.parametrize("name", sorted(PAYLOAD_BRANCHES))
def test_dataclass_fields_match_the_record_fields(name: str) -> None:
    fields = [f["name"] for f in PAYLOAD_BRANCHES[name]["fields"]]
    assert sorted(f.name for f in dataclasses.fields(PAYLOAD_TYPES[name])) == sorted(fields)


def _enums(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [e for branch in node for e in _enums(branch)]
    if not isinstance(node, dict):
        return []
    found = [node] if node.get("type") == "enum" else []
    for child in [f["type"] for f in node.get("fields", [])] + [node.get("items")]:
        found += _enums(child)
    return found


def test_python_enums_mirror_the_schema_enums_and_their_defaults() -> None:
    schema_enums = {e["name"]: e for e in _enums(EXPANDED)}
    assert set(schema_enums) == set(PYTHON_ENUMS)
    for name, python_enum in PYTHON_ENUMS.items():
        assert [member.value for member in python_enum] == schema_enums[name]["symbols"]
        fallback = ENUM_FALLBACKS.get(python_enum)
        assert (None if fallback is None else fallback.value) == schema_enums[name].get("default")


# --- unknown input -------------------------------------------------------------------------


def _record(payload: Any) -> dict[str, Any]:
    return ControlEvent.new(payload.table, payload, "test").to_record()


VERDICT_SAMPLE = SchemaChange(
    table="a.b", subject="s", to_version=1, to_schema_id=1, verdict=Verdict.APPLY
)


def test_unknown_symbol_of_an_enum_with_default_reads_as_the_default() -> None:
    record = _record(VERDICT_SAMPLE)
    record["payload"][1]["verdict"] = "APPLY_LATER"
    payload = ControlEvent.from_record(record).payload
    assert isinstance(payload, SchemaChange)
    assert payload.verdict is Verdict.QUARANTINE


def test_unknown_symbol_of_an_enum_without_default_is_an_unknown_event() -> None:
    command = OperatorCommand(command=OperatorCommandKind.FLUSH, table="a.b", requested_by="x")
    record = _record(command)
    record["payload"][1]["command"] = "DRAIN"
    with pytest.raises(UnknownEventError, match="DRAIN"):
        ControlEvent.from_record(record)


def test_unknown_payload_type_is_an_unknown_event() -> None:
    record = _record(VERDICT_SAMPLE)
    record["payload"] = ("io.icefjord.control.TableDropped", {"table": "a.b"})
    with pytest.raises(UnknownEventError, match="TableDropped"):
        ControlEvent.from_record(record)


def test_payload_without_record_name_is_rejected() -> None:
    record = _record(VERDICT_SAMPLE)
    record["payload"] = record["payload"][1]
    with pytest.raises(ValueError, match="return_record_name"):
        ControlEvent.from_record(record)


def test_a_v1_reader_applies_the_avro_default_to_a_newer_symbol(avro: Any) -> None:
    newer = copy.deepcopy(SCHEMA)
    payload_field = next(f for f in newer["fields"] if f["name"] == "payload")
    verdict = next(f for f in payload_field["type"][0]["fields"] if f["name"] == "verdict")
    verdict["type"]["symbols"].append("APPLY_LATER")
    record = _record(VERDICT_SAMPLE)
    record["payload"][1]["verdict"] = "APPLY_LATER"
    read_back = avro.read(avro.write(newer, record), newer, SCHEMA)
    python_view = ControlEvent.from_record(avro.read(avro.write(newer, record), newer)).payload
    assert isinstance(python_view, SchemaChange)
    assert read_back["payload"][1]["verdict"] == python_view.verdict == Verdict.QUARANTINE


# --- envelope rules ------------------------------------------------------------------------


def test_new_fills_a_uuid4_and_the_current_time() -> None:
    import time

    before = time.time_ns() // 1_000_000
    event = ControlEvent.new("a.b", VERDICT_SAMPLE, "schema-watcher/1")
    after = time.time_ns() // 1_000_000
    assert uuid.UUID(event.event_id).version == 4
    assert before <= event.produced_at_ms <= after
    assert event.producer == "schema-watcher/1"
    assert ControlEvent.new("a.b", VERDICT_SAMPLE, "x").event_id != event.event_id
    assert ControlEvent.new("a.b", VERDICT_SAMPLE, "x", now_ms=5).produced_at_ms == 5


def test_envelope_table_must_match_the_payload_table() -> None:
    with pytest.raises(ValueError, match="differs"):
        ControlEvent.new("other.table", VERDICT_SAMPLE, "x")


def test_operator_command_may_address_all_tables() -> None:
    command = OperatorCommand(command=OperatorCommandKind.PAUSE, table="*", requested_by="x")
    assert command.all_tables
    assert ControlEvent.new("*", command, "operator:x").table == "*"


def test_an_operator_command_result_of_an_unknown_status_reads_as_failed() -> None:
    result = OperatorCommandResult(
        command_event_id="e-1",
        table="a.b",
        command=OperatorCommandKind.PAUSE,
        status=OperatorCommandStatus.APPLIED,
    )
    record = _record(result)
    record["payload"][1]["status"] = "APPLIED_LATER"
    payload = ControlEvent.from_record(record).payload
    assert isinstance(payload, OperatorCommandResult)
    assert payload.status is OperatorCommandStatus.FAILED
