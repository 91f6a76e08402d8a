"""The packaged schemas and topic catalog, read through the contracts loader API."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings

import contracts
from contracts import (
    UnknownSchemaError,
    load_schema,
    parse_topic_catalog,
    parsed_schema,
    schema_names,
    schema_versions,
    topic_catalog,
)

pytestmark = pytest.mark.unit

AVRO_DIR = Path(contracts.__file__).parent / "avro"
ALL_VERSIONS = [(name, version) for name in schema_names() for version in schema_versions(name)]


def test_every_file_in_the_avro_folder_is_a_versioned_schema() -> None:
    files = sorted(path.name for path in AVRO_DIR.iterdir())
    assert files, "no schemas packaged"
    for file_name in files:
        assert re.fullmatch(r"[a-z][a-z0-9_]*\.v[1-9][0-9]*\.avsc", file_name), file_name
    expected = sorted(f"{name}.v{version}.avsc" for name, version in ALL_VERSIONS)
    assert files == expected


def test_the_contract_schemas_are_packaged() -> None:
    assert {"control_event", "change_record"} <= set(schema_names())


@pytest.mark.parametrize("name", schema_names())
def test_versions_start_at_one_without_gaps(name: str) -> None:
    versions = schema_versions(name)
    assert versions == list(range(1, len(versions) + 1))


@pytest.mark.parametrize(("name", "version"), ALL_VERSIONS)
def test_every_schema_parses_with_fastavro(name: str, version: int) -> None:
    fastavro.parse_schema(load_schema(name, version))
    assert parsed_schema(name, version) is parsed_schema(name, version)


@pytest.mark.parametrize("name", schema_names())
def test_latest_version_is_the_default(name: str) -> None:
    assert load_schema(name) == load_schema(name, schema_versions(name)[-1])


def test_load_schema_returns_a_fresh_dict_each_call() -> None:
    first = load_schema("control_event")
    first["fields"].clear()
    assert load_schema("control_event")["fields"]


def test_unknown_names_and_versions_are_lookup_errors() -> None:
    with pytest.raises(UnknownSchemaError):
        load_schema("no_such_contract")
    with pytest.raises(UnknownSchemaError):
        schema_versions("no_such_contract")
    with pytest.raises(LookupError):
        load_schema("control_event", 999)


@pytest.mark.parametrize(("name", "version"), ALL_VERSIONS)
def test_values_of_every_schema_round_trip(avro: Any, name: str, version: int) -> None:
    schema = load_schema(name, version)

    @settings(max_examples=40, deadline=None)
    @given(avro.values(schema))
    def round_trip(value: object) -> None:
        assert avro.read(avro.write(schema, value), schema) == value

    round_trip()


# --- topic catalog -------------------------------------------------------------------------

CATALOG = topic_catalog()
BY_NAME = {spec.name: spec for spec in CATALOG}


def test_catalog_names_are_unique_and_cover_every_topic() -> None:
    assert len(BY_NAME) == len(CATALOG)
    assert set(BY_NAME) == {
        "<server>.<schema>.<table>",
        "icefjord.changes.<namespace>.<table>",
        "icefjord.control",
        "icefjord.deadletter",
        "icefjord.quarantine",
        "icefjord.replays",
        "icefjord.control-state",
    }


@pytest.mark.parametrize(
    ("topic", "entry"),
    [
        ("inventory_pg.inventory.customers", "<server>.<schema>.<table>"),
        ("icefjord.changes.inventory.customers", "icefjord.changes.<namespace>.<table>"),
        ("icefjord.control", "icefjord.control"),
        ("icefjord.deadletter", "icefjord.deadletter"),
        ("icefjord.quarantine", "icefjord.quarantine"),
        ("icefjord.replays", "icefjord.replays"),
        ("icefjord.control-state", "icefjord.control-state"),
    ],
)
def test_each_concrete_topic_matches_exactly_one_entry(topic: str, entry: str) -> None:
    assert [spec.name for spec in CATALOG if spec.matches(topic)] == [entry]


def test_placeholders_stand_for_one_name_segment() -> None:
    changes = BY_NAME["icefjord.changes.<namespace>.<table>"]
    assert changes.is_pattern
    assert not BY_NAME["icefjord.control"].is_pattern
    assert not changes.matches("icefjord.changes.inventory")
    assert not changes.matches("icefjord.changes.a.b.c")
    assert not changes.matches("icefjordXchanges.a.b")


def test_managed_topics_carry_full_settings() -> None:
    for spec in CATALOG:
        if not spec.managed:
            assert spec.partitions is None
            continue
        assert spec.partitions is not None and spec.partitions > 0, spec.name
        assert spec.cleanup_policy in {"delete", "compact", "compact,delete"}, spec.name
        assert spec.retention_ms is not None
        assert spec.retention_ms == -1 or spec.retention_ms > 0
        assert spec.replication_factor is not None and spec.min_insync_replicas is not None
        assert 1 <= spec.min_insync_replicas < spec.replication_factor, spec.name


def test_avro_topics_name_a_packaged_schema_and_their_subject() -> None:
    avro_topics = [spec for spec in CATALOG if spec.value_format == "avro"]
    assert avro_topics
    for spec in avro_topics:
        assert spec.value_schema in schema_names()
        assert spec.value_subject == f"{spec.name}-value"


def test_control_topic_is_a_month_long_log() -> None:
    control = BY_NAME["icefjord.control"]
    assert control.cleanup_policy == "delete"
    assert control.retention_ms == 30 * 24 * 3600 * 1000


def test_dead_letter_headers_say_why_and_where_from() -> None:
    assert BY_NAME["icefjord.deadletter"].headers == (
        "icefjord.error.class",
        "icefjord.error.message",
        "icefjord.source.topic",
        "icefjord.source.partition",
        "icefjord.source.offset",
        "icefjord.failed_at_ms",
    )


def test_source_topics_are_read_only() -> None:
    source = BY_NAME["<server>.<schema>.<table>"]
    assert not source.managed
    assert "cdc-normalizer" in source.consumers
    assert not any(p.startswith("icefjord") or p == "cdc-normalizer" for p in source.producers)


_MINIMAL = """
[[topic]]
name = "t"
managed = true
purpose = "p"
key = "k"
value_format = "raw"
value_schema = "bytes"
"""


def test_catalog_parser_fills_defaults() -> None:
    (spec,) = parse_topic_catalog(_MINIMAL)
    assert spec.name == "t" and spec.headers == () and spec.partitions is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_MINIMAL * 2, "repeated"),
        (_MINIMAL + "partitons = 3\n", "unknown keys"),
        (_MINIMAL.replace('key = "k"\n', ""), "missing keys"),
        (_MINIMAL + 'partitions = "3"\n', "integer"),
        (_MINIMAL.replace("managed = true", 'managed = "yes"'), "managed"),
        ("[[topic]\n", "not valid TOML"),
    ],
)
def test_catalog_parser_rejects_bad_entries(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_topic_catalog(text)
