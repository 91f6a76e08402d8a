"""Identifier checks, partition and type DDL, offsets encoding and the checkpoint walk."""

from __future__ import annotations

import json
import re
import string
from typing import Any

import pytest
from history_support import FakeTable
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from services.iceberg_writer.batching import BatchClock
from services.iceberg_writer.committer import Committer
from services.iceberg_writer.ownership import OvertakenError
from services.iceberg_writer.state import TableState
from services.iceberg_writer.tables import (
    COMMIT_ID,
    EPOCH,
    OFFSETS,
    TRUNCATED_AT,
    WATERMARK,
    Checkpoint,
    checkpoint_of,
    commit_in,
    decode_offsets,
    encode_offsets,
    partition_sql,
    quote,
    recorded_since,
    spark_type,
)

pytestmark = pytest.mark.unit

PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
identifiers = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,30}\Z")
FORBIDDEN = "`. '\";"

# -- quote ------------------------------------------------------------------------------------


@given(identifiers)
def test_plain_identifiers_are_backtick_quoted(name: str) -> None:
    assert quote(name) == f"`{name}`"


@given(st.text(max_size=12), st.sampled_from(FORBIDDEN), st.text(max_size=12))
def test_a_name_with_a_backtick_dot_space_quote_or_semicolon_is_rejected(
    head: str, bad: str, tail: str
) -> None:
    with pytest.raises(ValueError):
        quote(head + bad + tail)


@given(st.text(max_size=20) | identifiers)
def test_quote_accepts_exactly_the_plain_identifiers(name: str) -> None:
    # A trailing newline is the one gap, pinned separately below.
    assume(not name.endswith("\n"))
    if PLAIN.fullmatch(name):
        assert quote(name) == f"`{name}`"
    else:
        with pytest.raises(ValueError):
            quote(name)


@pytest.mark.parametrize(
    "name", ["", "1st", "a-b", "café", "\uff4f\uff52\uff44\uff45\uff52\uff53", "x" * 129, "a\tb"]
)
def test_names_that_are_not_plain_identifiers_are_rejected(name: str) -> None:
    with pytest.raises(ValueError):
        quote(name)


def test_the_longest_plain_identifier_is_accepted() -> None:
    assert quote("x" * 128) == f"`{'x' * 128}`"


def test_a_name_with_a_trailing_newline_is_rejected() -> None:
    with pytest.raises(ValueError):
        quote("orders\n")


# -- partition_sql ----------------------------------------------------------------------------


@given(st.sampled_from(["identity", "years", "months", "days", "hours"]), identifiers)
def test_single_column_transforms(fn: str, column: str) -> None:
    assert partition_sql(f"{fn}({column})") == f"{fn}(`{column}`)"
    assert partition_sql(f"  {fn}({column}) ") == f"{fn}(`{column}`)"


@given(st.sampled_from(["bucket", "truncate"]), st.integers(1, 999_999), identifiers)
def test_parameterised_transforms(fn: str, n: int, column: str) -> None:
    assert partition_sql(f"{fn}({n}, {column})") == f"{fn}({n}, `{column}`)"
    assert partition_sql(f"{fn}({n},{column})") == f"{fn}({n}, `{column}`)"


@given(identifiers)
def test_a_bare_column_is_an_identity_partition(column: str) -> None:
    assert partition_sql(column) == f"`{column}`"


@pytest.mark.parametrize(
    "expression",
    [
        "",
        "days()",
        "days(a.b)",
        "days(`a`)",
        "days(a, b)",
        "days(a); DROP TABLE x",
        "days(a) OR 1=1",
        "identity(a)) --",
        "weeks(a)",
        "DAYS (a)",
        "bucket(0, id)",
        "bucket(-1, id)",
        "bucket(016, id)",
        "bucket(1000000, id)",
        "bucket(id)",
        "truncate(4)",
        "truncate(4, a b)",
        "a b",
        "a;b",
        "`a`",
        "a'",
        "days(a)\nDROP TABLE x",
    ],
)
def test_anything_else_is_rejected(expression: str) -> None:
    with pytest.raises(ValueError):
        partition_sql(expression)


SAFE_SQL = re.compile(
    r"(?:identity|years|months|days|hours)\(`\w+`\)|(?:bucket|truncate)\(\d+, `\w+`\)|`\w+`",
    re.ASCII,
)


@given(
    st.one_of(
        st.text(max_size=30),
        st.builds(
            lambda fn, inner: f"{fn}({inner})",
            st.sampled_from(["days", "bucket", "truncate", "identity"]),
            st.text(alphabet=string.printable, max_size=20),
        ),
    )
)
def test_whatever_is_accepted_renders_as_safe_sql(expression: str) -> None:
    try:
        sql = partition_sql(expression)
    except ValueError:
        return
    assert SAFE_SQL.fullmatch(sql), sql


# -- spark_type -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("iceberg", "ddl"),
    [
        (BooleanType(), "BOOLEAN"),
        (IntegerType(), "INT"),
        (LongType(), "BIGINT"),
        (FloatType(), "FLOAT"),
        (DoubleType(), "DOUBLE"),
        (StringType(), "STRING"),
        (BinaryType(), "BINARY"),
        (FixedType(16), "BINARY"),
        (DateType(), "DATE"),
        (TimestamptzType(), "TIMESTAMP"),
        (TimestampType(), "TIMESTAMP_NTZ"),
        (DecimalType(12, 2), "DECIMAL(12, 2)"),
        (DecimalType(38, 0), "DECIMAL(38, 0)"),
        (ListType(1, LongType(), element_required=False), "ARRAY<BIGINT>"),
        (MapType(1, StringType(), 2, DecimalType(9, 3)), "MAP<STRING, DECIMAL(9, 3)>"),
    ],
)
def test_spark_ddl_per_type(iceberg: IcebergType, ddl: str) -> None:
    assert spark_type(iceberg) == ddl


def test_nested_structs_mark_required_fields_not_null() -> None:
    inner = StructType(
        NestedField(3, "zip", StringType(), required=True),
        NestedField(4, "lines", ListType(5, StringType()), required=False),
    )
    outer = StructType(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "address", inner, required=False),
        NestedField(6, "at", TimestamptzType(), required=False),
    )
    assert spark_type(outer) == (
        "STRUCT<`id`: BIGINT NOT NULL, "
        "`address`: STRUCT<`zip`: STRING NOT NULL, `lines`: ARRAY<STRING>>, "
        "`at`: TIMESTAMP>"
    )
    assert spark_type(ListType(7, outer)) == f"ARRAY<{spark_type(outer)}>"


def test_struct_field_names_go_through_quote() -> None:
    with pytest.raises(ValueError):
        spark_type(StructType(NestedField(1, "a`b", LongType(), required=False)))


@pytest.mark.parametrize("iceberg", [TimeType(), UUIDType()])
def test_types_the_writer_never_creates_have_no_ddl(iceberg: IcebergType) -> None:
    with pytest.raises(ValueError):
        spark_type(iceberg)


# -- offsets ----------------------------------------------------------------------------------

topics = st.text(min_size=1, max_size=20) | st.sampled_from(
    ["icefjord.changes.shop.orders", "a:b", "x:1", "a:b:7", ":", "x."]
)


@given(st.dictionaries(st.tuples(topics, st.integers(0, 10_000)), st.integers(0, 2**62)))
def test_offsets_round_trip_through_the_summary_text(offsets: dict[tuple[str, int], int]) -> None:
    text = encode_offsets(offsets)
    assert isinstance(json.loads(text), dict)
    assert decode_offsets(text) == offsets


def test_offsets_text_is_the_contract_shape() -> None:
    text = encode_offsets({("icefjord.changes.shop.orders", 1): 42, ("a:b", 0): 7})
    assert json.loads(text) == {"icefjord.changes.shop.orders:1": 42, "a:b:0": 7}
    assert decode_offsets('{"t.x:y:3": 9}') == {("t.x:y", 3): 9}


# -- checkpoint_of ----------------------------------------------------------------------------


def writer(
    commit: str,
    offsets: dict[tuple[str, int], int],
    epoch: int = 1,
    watermark: int | None = 1000,
    truncated_at: str | None = None,
) -> dict[str, str]:
    summary = {
        "operation": "overwrite",
        OFFSETS: encode_offsets(offsets),
        COMMIT_ID: commit,
        EPOCH: str(epoch),
    }
    if watermark is not None:
        summary[WATERMARK] = str(watermark)
    if truncated_at is not None:
        summary[TRUNCATED_AT] = truncated_at
    return summary


MAINTENANCE = {"operation": "replace", "added-data-files": "1", "deleted-data-files": "9"}
T = "icefjord.changes.shop.orders"


def test_no_snapshot_no_checkpoint() -> None:
    assert checkpoint_of(FakeTable.of()) is None  # type: ignore[arg-type]


def test_only_maintenance_snapshots_no_checkpoint() -> None:
    table = FakeTable.of(MAINTENANCE, None, MAINTENANCE)
    assert checkpoint_of(table) is None  # type: ignore[arg-type]


def test_the_newest_writer_snapshot_wins_and_maintenance_on_top_is_stepped_over() -> None:
    table = FakeTable.of(
        writer("c1", {(T, 0): 10}, epoch=1, watermark=500),
        writer("c2", {(T, 0): 20}, epoch=2, watermark=900),
        MAINTENANCE,
        None,
    )
    assert checkpoint_of(table) == Checkpoint(  # type: ignore[arg-type]
        snapshot_id=102, commit_id="c2", epoch=2, watermark_ms=900, offsets={(T, 0): 20}
    )


def test_partitions_missing_from_the_newest_are_filled_from_older_snapshots() -> None:
    table = FakeTable.of(
        writer("c1", {(T, 0): 5, (T, 1): 7, (T, 2): 3}),
        MAINTENANCE,
        writer("c2", {(T, 0): 9, (T, 1): 8}),
        writer("c3", {(T, 1): 12}),
    )
    checkpoint = checkpoint_of(table)  # type: ignore[arg-type]
    assert checkpoint is not None
    assert checkpoint.commit_id == "c3" and checkpoint.snapshot_id == 104
    assert checkpoint.offsets == {(T, 0): 9, (T, 1): 12, (T, 2): 3}


def test_truncated_at_comes_from_the_newest_snapshot_carrying_it() -> None:
    table = FakeTable.of(
        writer("c1", {(T, 0): 1}, truncated_at="00000000000000000005"),
        writer("c2", {(T, 0): 2}, truncated_at="00000000000000000009"),
        writer("c3", {(T, 0): 3}),
        MAINTENANCE,
    )
    checkpoint = checkpoint_of(table)  # type: ignore[arg-type]
    assert checkpoint is not None
    assert checkpoint.commit_id == "c3"
    assert checkpoint.truncated_at == "00000000000000000009"


def test_no_truncate_in_the_history_no_truncated_at() -> None:
    checkpoint = checkpoint_of(FakeTable.of(writer("c1", {(T, 0): 1})))  # type: ignore[arg-type]
    assert checkpoint is not None and checkpoint.truncated_at is None


def test_missing_watermark_and_epoch_read_as_none_and_zero() -> None:
    summary = {OFFSETS: encode_offsets({(T, 0): 4})}
    checkpoint = checkpoint_of(FakeTable.of(summary))  # type: ignore[arg-type]
    assert checkpoint == Checkpoint(101, "", 0, None, {(T, 0): 4})


def test_the_walk_stops_at_an_expired_parent() -> None:
    table = FakeTable.of(
        writer("c1", {(T, 0): 1, (T, 1): 50}),
        MAINTENANCE,
        writer("c3", {(T, 0): 7}),
        expired=(102,),
    )
    checkpoint = checkpoint_of(table)  # type: ignore[arg-type]
    assert checkpoint is not None
    assert checkpoint.offsets == {(T, 0): 7}


snapshot_kinds = st.one_of(
    st.none(),
    st.just(MAINTENANCE),
    st.builds(
        lambda offsets, epoch, truncated: ("writer", offsets, epoch, truncated),
        st.dictionaries(
            st.tuples(st.sampled_from([T, "t:x"]), st.integers(0, 3)),
            st.integers(0, 10**6),
            max_size=4,
        ),
        st.integers(1, 9),
        st.none() | st.integers(0, 99).map(lambda n: f"{n:020d}"),
    ),
)


@given(st.lists(snapshot_kinds, max_size=8))
@settings(max_examples=50)
def test_any_history_resumes_every_partition_from_its_newest_writer_commit(
    history: list[Any],
) -> None:
    summaries: list[dict[str, str] | None] = []
    for i, kind in enumerate(history):
        if isinstance(kind, tuple):
            _, offsets, epoch, truncated = kind
            summaries.append(writer(f"c{i}", offsets, epoch=epoch, truncated_at=truncated))
        else:
            summaries.append(kind)
    checkpoint = checkpoint_of(FakeTable.of(*summaries))  # type: ignore[arg-type]
    writers = [(i, k) for i, k in enumerate(history) if isinstance(k, tuple)]
    if not writers:
        assert checkpoint is None
        return
    newest_index, (_, _, newest_epoch, _) = writers[-1]
    assert checkpoint is not None
    assert (checkpoint.snapshot_id, checkpoint.commit_id, checkpoint.epoch) == (
        101 + newest_index,
        f"c{newest_index}",
        newest_epoch,
    )
    expected: dict[tuple[str, int], int] = {}
    for _, (_, offsets, _, _) in writers:  # oldest first: newer values overwrite
        expected.update(offsets)
    assert checkpoint.offsets == expected
    truncates = [k[3] for _, k in writers if k[3] is not None]
    # The highest: an instance sharing the table may repeat an older truncate than another's.
    assert checkpoint.truncated_at == (max(truncates) if truncates else None)


def test_a_commit_is_found_by_its_id_behind_commits_made_after_it() -> None:
    table = FakeTable.of(
        writer("mine", {("t", 0): 10}, epoch=1),
        writer("theirs", {("t", 1): 7}, epoch=2),
        None,  # a compaction
    )
    found = commit_in(table, "mine")  # type: ignore[arg-type]
    assert found is not None
    assert (found.snapshot_id, found.epoch, dict(found.offsets)) == (101, 1, {("t", 0): 10})
    assert commit_in(table, "nobody's") is None  # type: ignore[arg-type]
    assert [s for s, _ in recorded_since(table, 101)] == [102]  # type: ignore[arg-type]
    assert [s for s, _ in recorded_since(table, 999)] == [102, 101]  # type: ignore[arg-type]


def test_a_previous_owners_commit_that_landed_after_the_claim_is_read_past() -> None:
    """Instance b claimed partition 0 and read its offset 10 at snapshot 101; a's commit
    already under way then landed with partition 0 at 25. b's next commit must not apply
    records 10-24 again: it reads on from 25."""
    state = TableState(name="shop.orders", topic="t", clock=BatchClock(1.0, 0.1, 10))
    state.claimed = {("t", 0)}
    state.committed = {("t", 0): 10}
    state.seen_snapshot = 101
    table = FakeTable.of(
        writer("a1", {("t", 0): 10, ("t", 1): 3}),
        writer("a2", {("t", 0): 25, ("t", 1): 4}),  # the late one
        writer("c1", {("t", 1): 9}),  # another instance, another partition
    )
    committer = Committer.__new__(Committer)
    with pytest.raises(OvertakenError, match=r"partitions \[0\]"):
        committer._check_overtaken(state, table)  # type: ignore[arg-type]
    assert state.committed == {("t", 0): 25} and state.seen_snapshot == 103
    committer._check_overtaken(state, table)  # type: ignore[arg-type]  # seen: nothing new
    # An older owner's commit below what this instance read is history, not a takeover.
    state.seen_snapshot = None
    state.committed = {("t", 0): 30}
    committer._check_overtaken(state, table)  # type: ignore[arg-type]
