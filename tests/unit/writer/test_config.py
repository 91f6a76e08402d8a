"""iceberg-writer settings: validation, per-table overrides and parsing from the environment."""

from __future__ import annotations

import json
import os
import re

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from services.iceberg_writer.config import (
    DEFAULT_TOPIC_PATTERN,
    MetadataColumnSettings,
    TableSettings,
    WriterSettings,
)
from services.iceberg_writer.tables import TableConfig
from services.iceberg_writer.types import MetadataColumns

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read only what each test sets."""
    for name in list(os.environ):
        if name.upper().startswith("ICEFJORD_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = WriterSettings()
    assert settings.metrics.port == 9403
    assert settings.topic_pattern == DEFAULT_TOPIC_PATTERN
    assert settings.freshness_target("shop.orders") == 5.0
    assert settings.metadata_columns.columns() == MetadataColumns(
        "_icefjord_op", "_icefjord_position", "_icefjord_source_ts"
    )
    assert settings.spark.shuffle_partitions == 1


def test_shuffle_partitions_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEFJORD_WRITER_SPARK__SHUFFLE_PARTITIONS", "8")
    assert WriterSettings().spark.shuffle_partitions == 8
    monkeypatch.setenv("ICEFJORD_WRITER_SPARK__SHUFFLE_PARTITIONS", "0")
    with pytest.raises(ValueError, match="shuffle_partitions"):
        WriterSettings()


@pytest.mark.parametrize(
    ("topic", "matches"),
    [
        ("icefjord.changes.shop.orders", True),
        ("icefjord.changes.inventory.stock_items", True),
        ("icefjord.changes.shop", False),
        ("icefjord.changes.shop.orders.extra", False),
        ("icefjord.control", False),
        ("xicefjord.changes.shop.orders", False),
    ],
)
def test_the_default_pattern_matches_change_topics_only(topic: str, matches: bool) -> None:
    assert bool(re.match(DEFAULT_TOPIC_PATTERN, topic)) is matches


@pytest.mark.parametrize("pattern", ["icefjord\\.changes\\..*", ".*", " ^icefjord"])
def test_a_topic_pattern_must_start_with_a_caret(pattern: str) -> None:
    with pytest.raises(ValidationError, match=r"start with '\^'"):
        WriterSettings(topic_pattern=pattern)


@pytest.mark.parametrize("pattern", ["^icefjord\\.changes\\.(shop", "^[a-", "^a{2,1}"])
def test_a_topic_pattern_must_compile(pattern: str) -> None:
    with pytest.raises(ValidationError, match="not a regular expression"):
        WriterSettings(topic_pattern=pattern)


def test_a_valid_topic_pattern_is_kept() -> None:
    assert WriterSettings(topic_pattern=r"^icefjord\.changes\.shop\..+$").topic_pattern == (
        r"^icefjord\.changes\.shop\..+$"
    )


def test_table_settings_accept_the_documented_partition_transforms() -> None:
    table = TableSettings(
        partition_by=("days(created_at)", "bucket(16, id)", "region"),
        properties={"write.target-file-size-bytes": "134217728"},
    )
    assert table.table_config() == TableConfig(
        ("days(created_at)", "bucket(16, id)", "region"),
        {"write.target-file-size-bytes": "134217728"},
    )


@pytest.mark.parametrize(
    "expression", ["days(created_at); DROP TABLE x", "weeks(created_at)", "bucket(0, id)", "a.b"]
)
def test_table_settings_reject_bad_partition_expressions(expression: str) -> None:
    with pytest.raises(ValidationError):
        TableSettings(partition_by=("days(created_at)", expression))


def test_freshness_target_per_table_overrides_the_default() -> None:
    settings = WriterSettings(
        freshness_target_s=20,
        tables={
            "shop.orders": TableSettings(freshness_target_s=5),
            "shop.items": TableSettings(partition_by=("id",)),
        },
    )
    assert settings.freshness_target("shop.orders") == 5
    assert settings.freshness_target("shop.items") == 20  # configured, but not its target
    assert settings.freshness_target("shop.unknown") == 20


@pytest.mark.parametrize("value", [0, -1])
def test_freshness_targets_must_be_positive(value: float) -> None:
    with pytest.raises(ValidationError):
        TableSettings(freshness_target_s=value)
    with pytest.raises(ValidationError):
        WriterSettings(freshness_target_s=value)


def test_metadata_columns_turn_off_with_an_empty_name_except_the_position() -> None:
    assert MetadataColumnSettings(op="", source_ts="").columns() == MetadataColumns(
        None, "_icefjord_position", None
    )
    with pytest.raises(ValidationError):
        MetadataColumnSettings(position="")


@pytest.mark.parametrize(
    "names",
    [
        {"op": "changed", "source_ts": "changed"},
        {"op": "_icefjord_position"},
        {"position": "change position"},
        {"source_ts": "ts; DROP TABLE x"},
    ],
)
def test_metadata_column_names_must_be_distinct_plain_identifiers(names: dict[str, str]) -> None:
    try:
        MetadataColumnSettings(**names)
    except ValidationError:
        return
    raise AssertionError(f"{names} accepted")


def test_tables_are_parsed_from_json_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "ICEFJORD_WRITER_TABLES",
        json.dumps(
            {
                "shop.orders": {
                    "partition_by": ["days(created_at)", "bucket(16, id)"],
                    "properties": {"write.target-file-size-bytes": "134217728"},
                    "freshness_target_s": 5,
                },
                "shop.items": {},
            }
        ),
    )
    monkeypatch.setenv("ICEFJORD_WRITER_FRESHNESS_TARGET_S", "30")
    settings = WriterSettings()
    orders = settings.tables["shop.orders"]
    assert orders.partition_by == ("days(created_at)", "bucket(16, id)")
    assert orders.properties == {"write.target-file-size-bytes": "134217728"}
    assert settings.freshness_target("shop.orders") == 5
    assert settings.freshness_target("shop.items") == 30
    assert settings.tables["shop.items"].table_config() == TableConfig((), {})


def test_a_bad_partition_in_the_environment_is_a_settings_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "ICEFJORD_WRITER_TABLES", json.dumps({"shop.orders": {"partition_by": ["days(a); --"]}})
    )
    with pytest.raises(ValidationError):
        WriterSettings()


def test_malformed_tables_json_is_a_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEFJORD_WRITER_TABLES", "{shop.orders: days}")
    with pytest.raises(SettingsError, match='"tables"'):
        WriterSettings()


def test_nested_and_plain_fields_come_from_prefixed_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ICEFJORD_WRITER_KAFKA__BOOTSTRAP_SERVERS", "kafka:29092")
    monkeypatch.setenv("ICEFJORD_WRITER_METRICS__PORT", "9999")
    monkeypatch.setenv("ICEFJORD_WRITER_METADATA_COLUMNS__OP", "")
    monkeypatch.setenv("ICEFJORD_WRITER_METADATA_COLUMNS__POSITION", "pos")
    monkeypatch.setenv("ICEFJORD_WRITER_TOPIC_PATTERN", r"^icefjord\.changes\.shop\..+$")
    monkeypatch.setenv("ICEFJORD_WRITER_MAX_BATCH_RECORDS", "500")
    monkeypatch.setenv("ICEFJORD_KAFKA__BOOTSTRAP_SERVERS", "other:1")  # another prefix
    settings = WriterSettings()
    assert settings.kafka.bootstrap_servers == "kafka:29092"
    assert settings.metrics.port == 9999
    assert settings.metadata_columns.columns() == MetadataColumns(
        None, "pos", "_icefjord_source_ts"
    )
    assert settings.topic_pattern == r"^icefjord\.changes\.shop\..+$"
    assert settings.max_batch_records == 500


def test_a_bad_topic_pattern_in_the_environment_is_a_settings_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ICEFJORD_WRITER_TOPIC_PATTERN", "icefjord.changes.*")
    with pytest.raises(ValidationError):
        WriterSettings()
