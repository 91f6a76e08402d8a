"""The bulk copier against a real PostgreSQL: its Parquet holds, value for value, what the
CDC pipeline stores in Iceberg for the same rows.

The oracle is the pipeline's own code: each row's Debezium value (the demo's generator,
which the source integration test holds to real Debezium), through the normalizer's
``convert_value``, an Avro round trip and the writer's converters into the writer's Arrow
schema. Started once per module: a PostgreSQL cluster of our own (skipped where PostgreSQL
is not installed); no Kafka, registry or Spark.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from harness import free_port
from psycopg.types.json import Json, Jsonb
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField

from icefjord.bulk import CopiedTable, UnsupportedColumn, copy_table
from icefjord.bulk.postgres import copy_tables, snapshot_connections
from icefjord.demo.envelopes import encode_value, field_schema
from icefjord.demo.model import Column, EnumType, Kind, TableDef, create_enum_sql, create_table_sql
from icefjord.demo.plan import ValueFactory
from icefjord.local.postgres import PostgresCluster, PostgresNotInstalled, find_bin_dir
from icefjord.local.settings import LocalSettings
from services.cdc_normalizer.connect_schema import connect_schema_from_json
from services.cdc_normalizer.logical_types import RecordNamer, avro_type, convert_value
from services.iceberg_writer.types import iceberg_type, row_converters
from shared import avro

TIER = EnumType("tier", ("bronze", "sølv", "with space"))
EVERY_KIND = TableDef(
    "every_kind",
    (
        Column("id", Kind.BIGINT, nullable=False),
        Column("name", Kind.TEXT, nullable=False),
        Column("small", Kind.SMALLINT),
        Column("count", Kind.INTEGER),
        Column("big", Kind.BIGINT),
        Column("price", Kind.NUMERIC, precision=12, scale=2),
        Column("wide", Kind.NUMERIC, precision=40, scale=5),  # past 38 digits: decimal text
        Column("hundreds", Kind.NUMERIC, precision=5, scale=-2),
        Column("score", Kind.NUMERIC_ANY),
        Column("credit", Kind.MONEY),
        Column("fee", Kind.REAL),
        Column("rate", Kind.DOUBLE),
        Column("flag", Kind.BOOLEAN),
        Column("note", Kind.TEXT),
        Column("at", Kind.TIMESTAMPTZ),
        Column("wall", Kind.TIMESTAMP, precision=6),
        Column("wall_ms", Kind.TIMESTAMP, precision=3),
        Column("day", Kind.DATE),
        Column("tod", Kind.TIME),
        Column("doc", Kind.JSON),
        Column("docb", Kind.JSONB),
        Column("uid", Kind.UUID),
        Column("tier", Kind.ENUM, enum=TIER),
        Column("tags", Kind.INT_ARRAY),
        Column("blob", Kind.BYTEA),
    ),
    ("id",),
)
UTC = dt.UTC


def edge_rows() -> list[dict[str, Any]]:
    """Hand-written rows at the edges (values PostgreSQL stores exactly as given)."""
    nulls: dict[str, Any] = {c.name: None for c in EVERY_KIND.columns}
    return [
        nulls | {"id": -1, "name": ""},
        nulls
        | {
            "id": -2,
            "name": "Zürich 東京 🚀 \x01\x02 tab\t back\\slash cr\r nl\n \"q\" 'a' ,;",
            "small": -32768,
            "count": -2147483648,
            "big": -9223372036854775808,
            "price": Decimal("-1.50"),
            "wide": Decimal("-12345678901234567890123456789012345.00100"),
            "hundreds": Decimal("-9999900"),
            "score": Decimal("1.50"),
            "credit": Decimal("-1869712.88"),
            "fee": 16777217.0,
            "rate": 1 / 3,
            "flag": False,
            "note": "",
            "at": dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),
            "wall": dt.datetime(1900, 1, 1, 0, 0, 0, 1),
            "wall_ms": dt.datetime(1955, 5, 5, 12, 0, 0, 123000),
            "day": dt.date(1969, 12, 31),
            "tod": dt.time(0, 0),
            "doc": '{"b": 1,  "a" : "Zürich \\u00fc \\"q\\" \\\\ \\n",\n "n": [1.50, 1e3, -0]}',
            "docb": '{"zz": 1.50, "a": {"y": [true, null]}, "é": "東京\\t\\"", "n": 1e3}',
            "uid": uuid.UUID("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
            "tier": "sølv",
            "tags": [],
            "blob": b"",
        },
        nulls
        | {
            "id": -3,
            "name": "ascii",
            "small": 32767,
            "count": 2147483647,
            "big": 9223372036854775807,
            "price": Decimal("9999999999.99"),
            "wide": Decimal("0.00000"),
            "hundreds": Decimal("0"),
            "score": Decimal("-1200.000"),
            "credit": Decimal("0.00"),
            "fee": 1e-7,
            "rate": 1e-300,
            "flag": True,
            "note": "x",
            "at": dt.datetime(1000, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
            "wall": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
            "wall_ms": dt.datetime(1969, 12, 31, 23, 59, 59, 999000),
            "day": dt.date(1, 1, 1),
            "tod": dt.time(23, 59, 59, 999999),
            "doc": "[]",
            "docb": '"just text \\u00e9"',
            "uid": uuid.UUID(int=0),
            "tier": "with space",
            "tags": [None, 1, None, -2147483648, 2147483647],
            "blob": b'\x00\xff\n\\"\x01\x02',
        },
        nulls | {"id": -4, "name": "zeros", "score": Decimal("0.000"), "tags": [None]},
    ]


def generated_rows(count: int, seed: int) -> list[dict[str, Any]]:
    """Rows from the demo's own value generator (about 10% NULL per nullable column)."""
    values = ValueFactory(random.Random(seed))
    rows = []
    for i in range(count):
        row = {c.name: values.value(c) for c in EVERY_KIND.columns}
        row["id"] = i
        for name in ("doc", "docb"):
            row[name] = None if row[name] is None else json.dumps(row[name])
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- the oracle


def pipeline_table(
    table: TableDef, rows: Sequence[Mapping[str, Any]], json_text: Mapping[int, Mapping[str, Any]]
) -> pa.Table:
    """What the writer hands Iceberg for ``rows``: Debezium's encoding, the normalizer's
    conversion, an Avro round trip, the writer's converters and Arrow schema.

    json and jsonb are the one exception: Debezium sends PostgreSQL's own text of them (the
    stored text for json, PostgreSQL's rendering for jsonb, which reorders keys and respaces),
    so their Debezium value is ``c::text`` as read through psycopg (``json_text``, by id).
    """
    namer = RecordNamer(table.name)
    schemas = {c.name: connect_schema_from_json(field_schema(c), c.name) for c in table.columns}
    fields: list[dict[str, Any]] = [
        {"name": c.name, "type": ["null", avro_type(schemas[c.name], (c.name,), namer)]}
        for c in table.columns
    ]
    record = {"type": "record", "name": "EveryKind", "fields": fields}
    parsed = avro.parse(record)
    converters = row_converters(record)
    out = []
    for row in rows:
        wire = {}
        for c in table.columns:
            if c.kind in (Kind.JSON, Kind.JSONB):
                debezium = json_text[row["id"]][c.name]
            else:
                # The generator scales decimals in the current context (Decimal.scaleb): wide
                # enough here for numeric(40, 5), which Debezium sends exact.
                with decimal.localcontext(prec=100):
                    debezium = encode_value(c, row[c.name])
            # Through Kafka's JsonConverter: JSON text and back.
            debezium = json.loads(json.dumps(debezium))
            wire[c.name] = convert_value(schemas[c.name], debezium, c.name)
        decoded = avro.decode(avro.encode(1, parsed, wire), parsed)
        for name, convert in converters.items():
            decoded[name] = convert(decoded[name])
        out.append(decoded)
    ids = iter(range(1, 10_000))
    iceberg_fields = []
    for field in fields:
        field_type, required = iceberg_type(field["type"], ids)
        iceberg_fields.append(NestedField(next(ids), field["name"], field_type, required=required))
    arrow = schema_to_pyarrow(Schema(*iceberg_fields), include_field_ids=False)
    # As the writer's arrow_batch: every column nullable.
    schema = pa.schema([pa.field(f.name, f.type, nullable=True) for f in arrow])
    return pa.Table.from_pylist(out, schema=schema)


# --------------------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="module")
def conninfo() -> Iterator[str]:
    try:
        find_bin_dir(None)
    except PostgresNotInstalled as exc:
        pytest.skip(str(exc))
    # Under /tmp, open to others: started by root, PostgreSQL runs as `postgres` and must
    # reach its directory (pytest's own tmp dirs are 0700).
    home = Path(tempfile.mkdtemp(prefix="icefjord-bulk-pg-"))
    home.chmod(0o755)
    settings = LocalSettings(
        state_dir=home / "state", postgres_port=free_port(), postgres_dir=home / "pg"
    )
    cluster = PostgresCluster(settings)
    try:
        cluster.start()
        yield cluster.conninfo()
    finally:
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def schema(conninfo: str) -> Iterator[str]:
    name = f"bulk_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
        yield name
        conn.execute(f"DROP SCHEMA {name} CASCADE")


def _adapt(column: Column, value: Any) -> Any:
    if value is None:
        return None
    if column.kind is Kind.JSON:
        return Json(value, dumps=lambda text: text)
    if column.kind is Kind.JSONB:
        return Jsonb(value, dumps=lambda text: text)
    return value


def load(conninfo: str, schema: str, table: TableDef, rows: Sequence[Mapping[str, Any]]) -> None:
    """Create ``table`` (and its enum types, unless an earlier table created them) and COPY
    ``rows`` into it."""
    enums = {c.enum for c in table.columns if c.enum is not None}
    names = ", ".join(c.name for c in table.columns)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for enum in enums:
            exists = conn.execute(
                "SELECT 1 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace"
                " WHERE n.nspname = %s AND t.typname = %s",
                (schema, enum.name),
            ).fetchone()
            if exists is None:
                conn.execute(create_enum_sql(schema, enum))
        for statement in create_table_sql(schema, table):
            conn.execute(statement)
        with (
            conn.cursor() as cursor,
            cursor.copy(f"COPY {schema}.{table.name} ({names}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row([_adapt(c, row[c.name]) for c in table.columns])


def snapshot_copy(conninfo: str, run: Callable[[psycopg.Connection[Any]], Any]) -> Any:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        try:
            return run(conn)
        finally:
            conn.execute("COMMIT")


def read_copied(copied: CopiedTable) -> pa.Table:
    return pa.concat_tables([pq.read_table(path) for path in copied.files])


# --------------------------------------------------------------------------- tests


def test_every_kind_is_copied_as_the_pipeline_stores_it(conninfo: str, schema: str) -> None:
    rows = edge_rows() + generated_rows(600, seed=11)
    load(conninfo, schema, EVERY_KIND, rows)
    with psycopg.connect(conninfo) as conn:
        texts = conn.execute(f"SELECT id, doc::text, docb::text FROM {schema}.every_kind")
        json_text = {i: {"doc": doc, "docb": docb} for i, doc, docb in texts}
    expected = pipeline_table(EVERY_KIND, rows, json_text).sort_by("id")

    out = Path(tempfile.mkdtemp(prefix="icefjord-bulk-"))
    try:
        copied = snapshot_copy(
            conninfo, lambda conn: copy_table(conn, schema, "every_kind", out / "one")
        )
        # Small chunks and files: the same rows split across many parses and files.
        split = snapshot_copy(
            conninfo,
            lambda conn: copy_table(
                conn, schema, "every_kind", out / "split", rows_per_file=250, chunk_bytes=4096
            ),
        )
        got = read_copied(copied)
        got_split = read_copied(split)
    finally:
        shutil.rmtree(out, ignore_errors=True)

    assert copied.rows == split.rows == len(rows)
    assert copied.columns == EVERY_KIND.names
    assert len(copied.files) == 1 and len(split.files) == 3
    assert all(Path(f).is_absolute() for f in copied.files)
    assert got.schema == pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("small", pa.int32()),
            ("count", pa.int32()),
            ("big", pa.int64()),
            ("price", pa.decimal128(12, 2)),
            ("wide", pa.string()),
            ("hundreds", pa.decimal128(7, 0)),
            ("score", pa.string()),
            ("credit", pa.string()),
            ("fee", pa.float32()),
            ("rate", pa.float64()),
            ("flag", pa.bool_()),
            ("note", pa.string()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("wall", pa.timestamp("us")),
            ("wall_ms", pa.timestamp("us")),
            ("day", pa.date32()),
            ("tod", pa.string()),
            ("doc", pa.string()),
            ("docb", pa.string()),
            ("uid", pa.string()),
            ("tier", pa.string()),
            ("tags", pa.list_(pa.int32())),
            ("blob", pa.binary()),
        ]
    )
    assert got_split.equals(got)
    # The writer's Arrow types are the large_* variants of the same values.
    got = got.cast(expected.schema).sort_by("id")
    for name in EVERY_KIND.names:
        assert got.column(name).equals(expected.column(name)), (
            name,
            [
                (i, a, b)
                for i, a, b in zip(
                    got.column("id").to_pylist(),
                    got.column(name).to_pylist(),
                    expected.column(name).to_pylist(),
                    strict=True,
                )
                if a != b
            ][:5],
        )
    by_id = {row["id"]: row for row in got.to_pylist()}
    # Spot checks that do not depend on the oracle.
    assert by_id[-2]["score"] == "1.5"  # Debezium strips trailing zeros of unconstrained numeric
    assert by_id[-3]["score"] == "-1200"
    assert by_id[-4]["score"] == "0"
    assert by_id[-2]["credit"] == "-1869712.88"
    assert by_id[-2]["doc"] == rows[1]["doc"]
    assert by_id[-2]["uid"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert by_id[-2]["at"] == dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC)
    assert by_id[-3]["tod"] == "23:59:59.999999"
    assert by_id[-3]["tags"] == [None, 1, None, -2147483648, 2147483647]
    assert by_id[-3]["blob"] == b'\x00\xff\n\\"\x01\x02'
    assert by_id[-1] == {"id": -1, "name": ""} | {n: None for n in EVERY_KIND.names[2:]}


def test_tables_copied_in_one_transaction_share_its_snapshot(conninfo: str, schema: str) -> None:
    first = TableDef("first", (Column("id", Kind.BIGINT, nullable=False),), ("id",))
    second = TableDef("second", (Column("id", Kind.BIGINT, nullable=False),), ("id",))
    load(conninfo, schema, first, [{"id": 1}])
    load(conninfo, schema, second, [{"id": 1}])
    out = Path(tempfile.mkdtemp(prefix="icefjord-bulk-"))

    def copy_both(conn: psycopg.Connection[Any]) -> tuple[CopiedTable, CopiedTable]:
        one = copy_table(conn, schema, "first", out)
        with psycopg.connect(conninfo, autocommit=True) as other:
            other.execute(f"INSERT INTO {schema}.second VALUES (2)")
        return one, copy_table(conn, schema, "second", out)

    try:
        one, two = snapshot_copy(conninfo, copy_both)
        assert (one.rows, two.rows) == (1, 1)
        assert read_copied(two).column("id").to_pylist() == [1]
        assert len({*one.files, *two.files}) == 2
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_connections_share_the_first_ones_snapshot(conninfo: str, schema: str) -> None:
    table = TableDef("counted", (Column("id", Kind.BIGINT, nullable=False),), ("id",))
    load(conninfo, schema, table, [{"id": 1}])
    with snapshot_connections(conninfo, 3) as connections:
        with psycopg.connect(conninfo, autocommit=True) as other:
            other.execute(f"INSERT INTO {schema}.counted VALUES (2)")
        # The two importers have not read anything yet: on their own snapshots they would
        # see the row committed after the first one's.
        seen = [c.execute(f"SELECT count(*) FROM {schema}.counted").fetchone() for c in connections]
        assert seen == [(1,), (1,), (1,)]
        assert len({c.info.backend_pid for c in connections}) == 3
    with psycopg.connect(conninfo) as conn:
        assert conn.execute(f"SELECT count(*) FROM {schema}.counted").fetchone() == (2,)


def test_copies_in_parallel_equal_one_by_one(conninfo: str, schema: str) -> None:
    names = ("small", "large", "middle")
    for name, count in zip(names, (10, 3000, 700), strict=True):
        table = TableDef(name, EVERY_KIND.columns, ("id",))
        load(conninfo, schema, table, generated_rows(count, seed=count))
    out = Path(tempfile.mkdtemp(prefix="icefjord-bulk-"))
    try:
        announced: list[str] = []
        parallel = copy_tables(
            conninfo, schema, names, out / "parallel", lambda c: announced.append(c.table)
        )
        alone = copy_tables(conninfo, schema, names, out / "alone", lambda c: None, workers=1)
        assert [c.table for c in alone] == ["large", "middle", "small"]  # largest first
        assert sorted(announced) == sorted(names)
        assert announced == [c.table for c in parallel]
        by_table = {c.table: c for c in alone}
        for copy in parallel:
            assert copy.rows == by_table[copy.table].rows
            assert read_copied(copy).equals(read_copied(by_table[copy.table]))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_a_failing_copy_is_raised_and_the_rest_still_announced(
    conninfo: str, schema: str, tmp_path: Path
) -> None:
    load(conninfo, schema, TableDef("fine", EVERY_KIND.columns, ("id",)), generated_rows(50, 3))
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {schema}.odd (id bigint PRIMARY KEY, at interval)")
    announced: list[str] = []
    with pytest.raises(UnsupportedColumn, match=r"odd\.at: type 'interval'"):
        copy_tables(
            conninfo,
            schema,
            ["odd", "fine"],
            tmp_path,
            lambda c: announced.append(c.table),
            workers=1,  # largest first: "fine" is copied before "odd" fails
        )
    assert announced == ["fine"]


def test_an_empty_table_gives_no_files(conninfo: str, schema: str, tmp_path: Path) -> None:
    load(conninfo, schema, EVERY_KIND, [])
    copied = snapshot_copy(conninfo, lambda conn: copy_table(conn, schema, "every_kind", tmp_path))
    assert copied == CopiedTable(schema, "every_kind", (), 0, EVERY_KIND.names)
    assert list(tmp_path.iterdir()) == []


def test_an_unsupported_type_is_refused_by_name(conninfo: str, schema: str, tmp_path: Path) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {schema}.odd (id bigint, span interval)")
    with pytest.raises(UnsupportedColumn, match=r"odd\.span: type 'interval'"):
        snapshot_copy(conninfo, lambda conn: copy_table(conn, schema, "odd", tmp_path))


def test_without_a_snapshot_transaction_it_refuses(conninfo: str, schema: str) -> None:
    load(conninfo, schema, EVERY_KIND, [])
    with psycopg.connect(conninfo, autocommit=True) as conn:
        with pytest.raises(ValueError, match="transaction"):
            copy_table(conn, schema, "every_kind", Path("/nonexistent"))
        conn.execute("BEGIN")  # READ COMMITTED: each statement its own snapshot
        with pytest.raises(ValueError, match="REPEATABLE READ"):
            copy_table(conn, schema, "every_kind", Path("/nonexistent"))
        conn.execute("ROLLBACK")
