"""The readers' value conversions and DuckDB's S3 secret, without a table."""

from __future__ import annotations

import datetime as dt
import decimal
from zoneinfo import ZoneInfo

from icefjord.demo.canonical import canonical
from icefjord.demo.model import Kind
from icefjord.readers.engines import _rows, duckdb_extension, duckdb_s3_secret


def test_rows_drop_the_writers_columns_and_turn_instants_into_microseconds() -> None:
    instant = dt.datetime(2024, 1, 1, 11, 0, 0, 123456, tzinfo=ZoneInfo("Europe/Oslo"))
    got = _rows(
        ["id", "_icefjord_position", "ts", "amount"],
        [(1, 99, instant, decimal.Decimal("1.50")), (2, 100, None, None)],
        instants=frozenset({"ts"}),
    )

    assert got.columns == frozenset({"id", "ts", "amount"})
    assert got.rows[0] == {"id": 1, "ts": 1704103200123456, "amount": decimal.Decimal("1.50")}
    assert got.rows[1] == {"id": 2, "ts": None, "amount": None}
    assert canonical(Kind.TIMESTAMPTZ, got.rows[0]["ts"]) == canonical(Kind.TIMESTAMPTZ, instant)


def test_a_pandas_timestamp_becomes_exact_microseconds() -> None:
    import pandas as pd

    stamp = pd.Timestamp("2024-01-01 10:00:00.123456", tz="UTC")
    assert _rows(["ts"], [(stamp,)], frozenset({"ts"})).rows[0]["ts"] == 1704103200123456


def test_the_s3_secret_carries_endpoint_keys_region_and_path_style() -> None:
    secret = duckdb_s3_secret(
        {
            "s3.endpoint": "http://127.0.0.1:8333",
            "s3.access-key-id": "icefjord",
            "s3.secret-access-key": "it's secret",
            "client.region": "us-east-1",
            "s3.path-style-access": "true",
        }
    )
    assert secret == (
        "CREATE SECRET icefjord_s3 (TYPE s3, KEY_ID 'icefjord', SECRET 'it''s secret', "
        "REGION 'us-east-1', ENDPOINT '127.0.0.1:8333', USE_SSL false, URL_STYLE 'path')"
    )


def test_a_warehouse_on_local_disk_needs_no_secret() -> None:
    assert duckdb_s3_secret({"type": "sql", "warehouse": "file:///w"}) is None


def test_the_extensions_come_from_their_wheels() -> None:
    for name in ("iceberg", "avro", "httpfs"):
        path = duckdb_extension(name)
        assert path.name == f"{name}.duckdb_extension"
        assert path.is_file()
