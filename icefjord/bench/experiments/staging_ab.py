"""The writer's staging table built row by row (before 2026-11-29) and column by column (now).

Builds N changes of a six-column table (bigint key, text, decimal, int, timestamptz, date;
one in ten a delete), then times, best of --repeat: a dict per row for
``pyarrow.Table.from_pylist`` with a ``datetime`` per source commit time (the old
``staging_rows``, reproduced here), and ``records.staging_table``. Checks both give the same
table, then prints microseconds per change for each. Plain CPython, no stack:

    .venv/bin/python icefjord/bench/experiments/staging_ab.py --changes 3000
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from services.iceberg_writer.changes import Change, Op
from services.iceberg_writer.records import staging_table
from services.iceberg_writer.types import STAGING_FLAG, MetadataColumns

UTC = dt.UTC
METADATA = MetadataColumns()
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("amount", pa.decimal128(14, 2)),
        pa.field("qty", pa.int32()),
        pa.field("created", pa.timestamp("us", tz="UTC")),
        pa.field("day", pa.date32()),
        pa.field("_icefjord_op", pa.string()),
        pa.field("_icefjord_position", pa.string()),
        pa.field("_icefjord_source_ts", pa.timestamp("us", tz="UTC")),
        pa.field(STAGING_FLAG, pa.bool_(), nullable=False),
    ]
)


def changes(count: int) -> list[Change]:
    out = []
    start = dt.datetime(2024, 1, 1, tzinfo=UTC)
    for i in range(count):
        op = Op.DELETE if i % 10 == 0 else Op.UPDATE
        row = None
        if op is not Op.DELETE:
            row = {
                "id": i,
                "name": f"name {i}",
                "amount": decimal.Decimal(f"{i}.25"),
                "qty": i % 100,
                "created": start + dt.timedelta(seconds=i),
                "day": dt.date(2024, 1, 1) + dt.timedelta(days=i % 300),
            }
        out.append(Change("t", op, f"{i:020d}", 1_700_000_000_000 + i, (i,), row, "t", 0, i, 1))
    return out


def row_by_row(batch: Sequence[Change]) -> pa.Table:
    """What the writer did before: one dict per change, then Arrow reads the dicts."""
    rows: list[dict[str, Any]] = []
    for change in batch:
        row: dict[str, Any] = {}
        if change.row is not None and change.op is not Op.DELETE:
            row.update(change.row)
        row["id"] = change.key[0]
        row["_icefjord_op"] = change.op.value
        row["_icefjord_position"] = change.position
        row["_icefjord_source_ts"] = dt.datetime.fromtimestamp(change.source_ts_ms / 1000, UTC)
        row[STAGING_FLAG] = change.op is Op.DELETE
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def column_by_column(batch: Sequence[Change]) -> pa.Table:
    return staging_table(batch, SCHEMA, ("id",), {}, METADATA)


def best(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.process_time()
        run()
        times.append(time.process_time() - began)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    batch = changes(args.changes)
    if not row_by_row(batch).equals(column_by_column(batch)):
        raise SystemExit("the two ways give different tables")
    for name, way in (("row by row", row_by_row), ("column by column", column_by_column)):
        seconds = best(lambda way=way: way(batch), args.repeat)  # type: ignore[misc]
        print(f"{name:>17}: {seconds / args.changes * 1e6:.2f} us per change")


if __name__ == "__main__":
    main()
