"""Source positions: per-connector rules and the order property (string order = source order)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.cdc_normalizer.errors import InvalidPosition
from services.cdc_normalizer.position import (
    PositionKind,
    format_position,
    parse_position,
    source_position,
    sqlserver_lsn_parts,
)

pytestmark = pytest.mark.unit

P20 = "{:020d}".format


def pos(source: dict, ts_ms: int = 1, partition: int = 0, offset: int = 0):
    return source_position(source, ts_ms=ts_ms, partition=partition, offset=offset)


def test_postgres_sequence_then_txid() -> None:
    position = pos({"connector": "postgresql", "sequence": '["100","120"]', "lsn": 120, "txId": 7})
    assert position.kind is PositionKind.POSTGRES
    assert position.text == f"{P20(100)}.{P20(120)}.{P20(7)}"


def test_postgres_without_sequence_uses_lsn() -> None:
    position = pos({"connector": "postgresql", "lsn": 24023128, "txId": 555})
    assert position.text == f"{P20(24023128)}.{P20(555)}"


def test_postgres_lsn_text_form() -> None:
    # 0/16B3748 = 0x16B3748
    assert pos({"lsn": "0/16B3748"}).components == (0x16B3748, 0)
    assert pos({"lsn": "1/0"}).components == (1 << 32, 0)


def test_postgres_interleaved_transactions_sort_by_commit() -> None:
    """Tx b commits after tx a but wrote at lower LSNs: commit LSN first keeps stream order."""
    tx_a = pos({"connector": "postgresql", "sequence": '["500","310"]', "txId": 2})
    tx_b = pos({"connector": "postgresql", "sequence": '["600","300"]', "txId": 3})
    assert tx_a.text < tx_b.text


def test_mysql_file_pos_row() -> None:
    source = {"connector": "mysql", "file": "mysql-bin.000123", "pos": 4567, "row": 2}
    assert pos(source).text == f"{P20(123)}.{P20(4567)}.{P20(2)}"
    rotated = {"connector": "mysql", "file": "mysql-bin.000124", "pos": 4, "row": 0}
    assert pos(source).text < pos(rotated).text


def test_sqlserver_lsns() -> None:
    assert sqlserver_lsn_parts("00000027:00000758:0005", "x") == (0x27, 0x758, 5)
    source = {
        "connector": "sqlserver",
        "commit_lsn": "00000027:00000758:0005",
        "change_lsn": "00000027:00000758:0003",
        "event_serial_no": 1,
    }
    assert pos(source).components == (0x27, 0x758, 5, 0x27, 0x758, 3, 1)
    snapshot = {
        "connector": "sqlserver",
        "commit_lsn": "00000027:00000758:0005",
        "change_lsn": None,
    }
    assert pos(snapshot).components == (0x27, 0x758, 5, 0, 0, 0, 0)


def test_mongodb() -> None:
    source = {"connector": "mongodb", "ts_ms": 1641636930000, "ord": 3}
    assert pos(source).components == (1641636930000, 3)


def test_fallback() -> None:
    position = pos({"connector": "oracle", "scn": "123"}, ts_ms=99, partition=2, offset=7)
    assert position.kind is PositionKind.FALLBACK
    assert position.components == (99, 2, 7)


def test_detect_without_connector_field() -> None:
    assert pos({"lsn": 5}).kind is PositionKind.POSTGRES
    assert pos({"file": "binlog.000002", "pos": 9}).kind is PositionKind.MYSQL
    assert pos({"commit_lsn": "00000001:00000001:0001"}).kind is PositionKind.SQLSERVER
    assert pos({"ord": 1, "ts_ms": 5}).kind is PositionKind.MONGODB


@pytest.mark.parametrize(
    "source",
    [
        {"connector": "postgresql", "sequence": '["1","2","3"]'},
        {"connector": "postgresql", "lsn": "x"},
        {"connector": "mysql", "file": "mysql-bin", "pos": 1},
        {"connector": "sqlserver", "commit_lsn": "zz:00:00"},
        {"connector": "postgresql", "lsn": 10**20},
        {"connector": "postgresql", "lsn": True},
    ],
)
def test_malformed_positions_are_rejected(source) -> None:
    with pytest.raises(InvalidPosition):
        pos(source)


# ------------------------------------------------------------------ properties

u64 = st.integers(min_value=0, max_value=2**64 - 1)


@given(st.lists(u64, min_size=1, max_size=6), st.lists(u64, min_size=1, max_size=6))
def test_string_order_is_tuple_order(a: list[int], b: list[int]) -> None:
    # same length, as for positions of one connector
    n = min(len(a), len(b))
    left, right = tuple(a[:n]), tuple(b[:n])
    assert (format_position(left) < format_position(right)) == (left < right)
    assert parse_position(format_position(left)) == left


@given(st.lists(st.tuples(u64, u64, st.integers(0, 2**32)), min_size=2, max_size=30))
def test_postgres_positions_sort_like_source_order(
    stream_events: list[tuple[int, int, int]],
) -> None:
    """Events in stream order (commit LSN, then event LSN) sort in the same order as text."""
    stream = sorted(stream_events)
    texts = [
        pos({"connector": "postgresql", "sequence": json.dumps([str(c), str(e)]), "txId": t}).text
        for c, e, t in stream
    ]
    assert texts == sorted(texts)


@given(
    st.lists(
        st.tuples(st.integers(1, 999999), st.integers(4, 2**40), st.integers(0, 10_000)),
        min_size=2,
        max_size=30,
    )
)
def test_mysql_positions_sort_like_binlog_order(stream_events: list[tuple[int, int, int]]) -> None:
    stream = sorted(stream_events)
    texts = [
        pos({"connector": "mysql", "file": f"mysql-bin.{f:06d}", "pos": p, "row": r}).text
        for f, p, r in stream
    ]
    assert texts == sorted(texts)


lsn_part = st.tuples(
    st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**16 - 1)
)


@given(st.lists(st.tuples(lsn_part, lsn_part, st.integers(0, 2**31)), min_size=2, max_size=30))
def test_sqlserver_positions_sort_like_lsn_order(stream_events) -> None:
    """80-bit LSNs, compared as integers, order the same way as the position text."""

    def text(parts: tuple[int, int, int]) -> str:
        return f"{parts[0]:08X}:{parts[1]:08X}:{parts[2]:04X}"

    def as_int(parts: tuple[int, int, int]) -> int:
        return int(text(parts).replace(":", ""), 16)

    stream = sorted(stream_events, key=lambda e: (as_int(e[0]), as_int(e[1]), e[2]))
    texts = [
        pos(
            {
                "connector": "sqlserver",
                "commit_lsn": text(commit),
                "change_lsn": text(change),
                "event_serial_no": serial,
            }
        ).text
        for commit, change, serial in stream
    ]
    assert texts == sorted(texts)
