"""The writer's compiled change path equals its Python path: the same changes from the same
bodies, the same staging tables from the same batches, or the Python path takes over."""

from __future__ import annotations

import copy
import io
import json
import math
import random
import struct
import uuid
from dataclasses import dataclass
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from changes_support import OPS, change_record_schema
from pyiceberg.io.pyarrow import schema_to_pyarrow

from services.iceberg_writer import native_changes
from services.iceberg_writer.batching import BatchClock
from services.iceberg_writer.changes import Change, Op
from services.iceberg_writer.decoding import ChangeDecoder
from services.iceberg_writer.native_changes import EncodedRow, arrow_columns, change_program
from services.iceberg_writer.records import staging_table
from services.iceberg_writer.state import TableState
from services.iceberg_writer.types import (
    STAGING_FLAG,
    MetadataColumns,
    row_converters,
    table_schema,
)
from shared.avro import AvroCodec, WireFormatError

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not native_changes.AVAILABLE, reason="icefjord-native is not built"),
]

METADATA = MetadataColumns()

# Column kinds: (Avro type, a raw value generator in range, one out of range or None).
_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)
_MIN_US, _MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999


def _decimal(precision: int, scale: int) -> dict[str, Any]:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


KINDS: dict[str, Any] = {
    "boolean": "boolean",
    "int": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "string": "string",
    "uuid": {"type": "string", "logicalType": "uuid"},
    "bytes": "bytes",
    "date": {"type": "int", "logicalType": "date"},
    "time-millis": {"type": "int", "logicalType": "time-millis"},
    "time-micros": {"type": "long", "logicalType": "time-micros"},
    "timestamp-micros": {"type": "long", "logicalType": "timestamp-micros"},
    "timestamp-millis": {"type": "long", "logicalType": "timestamp-millis"},
    "local-timestamp-micros": {"type": "long", "logicalType": "local-timestamp-micros"},
    "local-timestamp-millis": {"type": "long", "logicalType": "local-timestamp-millis"},
    "decimal": _decimal(14, 2),
    "decimal38": _decimal(38, 10),
    "enum": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]},
    # Arrays (list columns): nullable ints, text, nullable dates, booleans past a byte.
    "array-int": {"type": "array", "items": ["null", "int"]},
    "array-string": {"type": "array", "items": "string"},
    "array-date": {"type": "array", "items": ["null", {"type": "int", "logicalType": "date"}]},
    "array-boolean": {"type": "array", "items": "boolean"},
}


def _signed_bytes(n: int) -> bytes:
    size = max(1, (n.bit_length() + 8) // 8)
    return n.to_bytes(size, "big", signed=True)


def raw_value(kind: str, rng: random.Random, wild: bool) -> Any:
    """A value as plain Avro writes it (logical types as their base type); ``wild``: now and
    then one the Python decoder rejects or reads through fastavro."""
    edge = rng.random() < 0.2
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice(_I32) if edge else rng.randint(-1000, 1000)
    if kind == "long":
        return rng.choice(_I64) if edge else rng.randint(-(10**12), 10**12)
    if kind in ("float", "double"):
        if edge:
            return rng.choice([math.inf, -math.inf, math.nan, 0.0, -0.0, 1e-300, 3.4e38])
        value = rng.uniform(-1e6, 1e6)
        return struct.unpack("<f", struct.pack("<f", value))[0] if kind == "float" else value
    if kind == "uuid":
        text = str(uuid.UUID(int=rng.getrandbits(128)))
        if wild and edge:  # the decoder makes the first canonical and refuses the second
            return rng.choice([text.upper(), "not a uuid"])
        return text
    if kind == "string":
        return rng.choice(["", "Åsa", "x" * 300, "\u2603\U0001f600", "a\x00b", str(rng.random())])
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
    if kind == "date":
        if wild and edge:
            return rng.choice([-719_163, 2_932_897, *_I32])
        return rng.choice([-719_162, 2_932_896]) if edge else rng.randint(-30_000, 30_000)
    if kind == "time-millis":
        if wild and edge:
            return rng.choice([-1, 86_400_000])
        return rng.choice([0, 86_399_999]) if edge else rng.randrange(86_400_000)
    if kind == "time-micros":
        if wild and edge:
            return rng.choice([-1, 86_400_000_000])
        return rng.choice([0, 86_399_999_999]) if edge else rng.randrange(86_400_000_000)
    if kind.endswith("timestamp-micros"):
        if wild and edge:
            return rng.choice([_MIN_US - 1, _MAX_US + 1, *_I64])
        return rng.choice([_MIN_US, _MAX_US]) if edge else rng.randint(-(10**16), 10**16)
    if kind.endswith("timestamp-millis"):
        if wild and edge:
            return rng.choice([_MIN_US // 1000 - 1, _MAX_US // 1000 + 1])
        if edge:
            return rng.choice([-(_MIN_US // -1000), _MAX_US // 1000])
        return rng.randint(-(10**13), 10**13)
    if kind in ("decimal", "decimal38"):
        digits = 14 if kind == "decimal" else 38
        top = 10**digits - 1
        if wild and edge:
            return _signed_bytes(rng.choice([top + 1, -(top + 1)]))
        return _signed_bytes(rng.choice([top, -top, 0]) if edge else rng.randint(-top, top))
    if kind == "enum":
        return rng.choice(["RED", "GREEN", "BLUE"])
    if kind.startswith("array-"):
        item = kind.removeprefix("array-")
        nullable = isinstance(KINDS[kind]["items"], list)
        size = rng.choice([0, 1, 3, 9, 20])
        return [
            None if nullable and rng.random() < 0.2 else raw_value(item, rng, wild)
            for _ in range(size)
        ]
    raise AssertionError(kind)


def plain(schema: Any) -> Any:
    """``schema`` without its logical types: the same bytes, written from raw values."""
    if isinstance(schema, list):
        return [plain(s) for s in schema]
    if isinstance(schema, dict):
        out = {k: plain(v) for k, v in schema.items() if k not in ("logicalType",)}
        return out
    return schema


@dataclass
class Table:
    schema: dict[str, Any]
    columns: dict[str, str]  # name -> kind
    keys: tuple[str, ...]
    key_kinds: dict[str, str]


def random_table(rng: random.Random, index: int) -> Table:
    names = rng.sample(sorted(KINDS), rng.randint(1, 8))
    columns = {f"c_{kind.replace('-', '_')}": kind for kind in names}
    key_kinds = {"id": rng.choice(["int", "long", "string"])}
    if rng.random() < 0.3:
        key_kinds["region"] = "string"
    row_fields = [{"name": k, "type": KINDS[v]} for k, v in key_kinds.items()]
    for name, kind in columns.items():
        avro = copy.deepcopy(KINDS[kind])
        if isinstance(avro, dict) and avro.get("type") == "enum":
            avro["name"] = f"Colour{index}"
        row_fields.append(
            {"name": name, "type": ["null", avro], "default": None}
            if rng.random() < 0.5
            else {"name": name, "type": avro}
        )
    key_fields = [{"name": k, "type": v} for k, v in key_kinds.items()]
    schema = change_record_schema(f"T{index}", "test", key_fields, row_fields, list(key_kinds))
    return Table(schema, columns, tuple(key_kinds), key_kinds)


def random_record(table: Table, rng: random.Random, wild: bool) -> dict[str, Any]:
    op = rng.choice(OPS)
    key = {k: raw_value(v, rng, False) for k, v in table.key_kinds.items()}
    for k, v in table.key_kinds.items():
        if v == "string":
            key[k] = f"k{rng.randrange(50)}"
        else:
            key[k] = rng.randrange(50)
    after = None
    if op not in ("DELETE", "TRUNCATE"):
        after = dict(key)
        row_fields = table.schema["fields"][6]["type"][1]["fields"]
        nullable = {f["name"] for f in row_fields if isinstance(f["type"], list)}
        for name, kind in table.columns.items():
            if name in nullable and rng.random() < 0.2:
                after[name] = None
            else:
                after[name] = raw_value(kind, rng, wild)
    unchanged = None
    if rng.random() < 0.3:
        unchanged = rng.sample(sorted(table.columns), rng.randint(0, len(table.columns)))
    return {
        "op": op,
        "position": f"{rng.randrange(10**6):020d}.{rng.randrange(100):020d}",
        "source_ts_ms": rng.randint(0, 2 * 10**12),
        "tx_id": rng.choice([None, "tx-1"]),
        "source": {f"s{i}": "v" * i for i in range(rng.randrange(5))},
        "key": key,
        "after": after,
        "unchanged": unchanged,
    }


def a_create(table: Table, rng: random.Random) -> dict[str, Any]:
    while (record := random_record(table, rng, False))["after"] is None:
        pass
    return {**record, "op": "CREATE"}


def encode(schema: dict[str, Any], record: dict[str, Any], schema_id: int) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(plain(schema)), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()


class Registered:
    def __init__(self, text: str) -> None:
        self.schema_str = text


class Registry:
    def __init__(self) -> None:
        self.schemas: dict[int, str] = {}

    def get_schema(self, schema_id: int) -> Registered:
        return Registered(self.schemas[schema_id])


@dataclass
class Message:
    data: bytes
    at: int

    def value(self) -> bytes:
        return self.data

    def topic(self) -> str:
        return "icefjord.changes.test.t"

    def partition(self) -> int:
        return self.at % 3

    def offset(self) -> int:
        return self.at


def state_of(table: Table, schema_id: int) -> TableState:
    parsed = fastavro.parse_schema(table.schema)
    row = next(f for f in table.schema["fields"] if f["name"] == "after")["type"][1]
    return TableState(
        name="test.t",
        topic="icefjord.changes.test.t",
        clock=BatchClock(5.0, 0.1, 1000),
        keys=table.keys,
        current_id=schema_id,
        reader=parsed,
        converters=row_converters(row),
    )


def arrow_schema(table: Table) -> pa.Schema:
    schema, _ = table_schema(table.schema, METADATA)
    fields = [pa.field(f.name, f.type, nullable=True) for f in schema_to_pyarrow(schema)]
    fields.append(pa.field(STAGING_FLAG, pa.bool_(), nullable=False))
    return pa.schema(fields)


def decoders(registry: Registry) -> tuple[ChangeDecoder, ChangeDecoder]:
    """The decoder as the service runs it, and one whose compiled path is off."""
    compiled = ChangeDecoder(registry, AvroCodec(registry))
    python = ChangeDecoder(registry, AvroCodec(registry))
    python._compiled = lambda *args: None  # type: ignore[method-assign]
    return compiled, python


def outcome(decoder: ChangeDecoder, state: TableState, message: Message) -> Change | str:
    try:
        return decoder.decode(state, message, state.current_id)
    except (WireFormatError, KeyError, ValueError, TypeError) as exc:
        return f"error: {type(exc).__name__}"


def plain_change(change: Change | str) -> Any:
    if isinstance(change, str):
        return change
    row = None if change.row is None else json.dumps(dict(change.row), default=repr, sort_keys=True)
    return change._replace(row=None), row


@pytest.mark.parametrize("seed", range(40))
def test_random_records_give_the_python_paths_changes_and_staging_tables(seed: int) -> None:
    rng = random.Random(seed)
    table = random_table(rng, seed)
    registry = Registry()
    registry.schemas[7] = json.dumps(table.schema)
    compiled, python = decoders(registry)
    state = state_of(table, 7)
    schema = arrow_schema(table)
    wild = seed % 2 == 1
    program = change_program(table.schema, table.keys)
    assert program is not None
    taken = 0
    batch: list[tuple[Change, Change]] = []
    for at in range(150):
        record = random_record(table, rng, wild)
        message = Message(encode(table.schema, record, 7), at)
        ours, theirs = outcome(compiled, state, message), outcome(python, state, message)
        if program.decode(message.data, 5) is not None:
            taken += 1
            assert isinstance(ours, Change)
            assert isinstance(ours.row, EncodedRow) or ours.op in (Op.DELETE, Op.TRUNCATE)
        elif isinstance(ours, Change):  # not compiled: the Python path's own result
            assert not isinstance(ours.row, EncodedRow)
        assert plain_change(ours) == plain_change(theirs)
        if isinstance(ours, Change) and isinstance(theirs, Change) and ours.op is not Op.TRUNCATE:
            batch.append((ours, theirs))
    # Every record in range takes the compiled path; of the others, those that are.
    assert taken == 150 if not wild else taken > 20, f"{taken} of 150 took the compiled path"
    keys = table.keys
    converters = state.converters
    try:
        theirs_table = staging_table([t for _, t in batch], schema, keys, converters, METADATA)
    except pa.ArrowInvalid as exc:  # a value Arrow refuses (a decimal past its precision)
        with pytest.raises(type(exc)):
            staging_table([o for o, _ in batch], schema, keys, converters, METADATA)
        # The compiled path never reads such a value: without those, both build.
        batch = [(o, t) for o, t in batch if isinstance(o.row, EncodedRow) or o.row is None]
        theirs_table = staging_table([t for _, t in batch], schema, keys, converters, METADATA)
    ours_table = staging_table([o for o, _ in batch], schema, keys, converters, METADATA)
    assert ours_table.schema == theirs_table.schema
    for name in schema.names:
        a, b = ours_table.column(name), theirs_table.column(name)
        assert a.equals(b) or _same_floats(a, b), name


def _same_floats(a: pa.ChunkedArray, b: pa.ChunkedArray) -> bool:
    """Equal but for NaN, which Arrow's equality calls unequal to itself."""
    if not pa.types.is_floating(a.type):
        return False
    left, right = a.to_pylist(), b.to_pylist()
    return all(
        x == y or (x is not None and y is not None and math.isnan(x) and math.isnan(y))
        for x, y in zip(left, right, strict=True)
    )


def test_the_compiled_path_is_taken_and_its_columns_come_from_the_program() -> None:
    """Not the Python loop in disguise: a batch of compiled rows is built by ``columns``."""
    rng = random.Random(1)
    table = random_table(rng, 1)
    registry = Registry()
    registry.schemas[3] = json.dumps(table.schema)
    compiled, _ = decoders(registry)
    state = state_of(table, 3)
    changes = []
    for at in range(50):
        record = a_create(table, rng)
        change = compiled.decode(state, Message(encode(table.schema, record, 3), at), 3)
        assert isinstance(change.row, EncodedRow)
        changes.append(change)
    fields = [f for f in arrow_schema(table) if f.name in table.columns]
    arrays = arrow_columns([c.row for c in changes], fields)
    assert arrays is not None and len(arrays) == len(fields)
    assert all(len(a) == 50 for a in arrays)
    # A row of another program, a plain dict, or a type the column does not map to: None.
    assert arrow_columns([*[c.row for c in changes], {"id": 1}], fields) is None
    wrong = [pa.field(f.name, pa.list_(pa.int8())) for f in fields]
    assert arrow_columns([c.row for c in changes], wrong) is None


def test_bodies_the_program_is_not_certain_of_go_to_the_python_path() -> None:
    rng = random.Random(2)
    table = random_table(rng, 2)
    program = change_program(table.schema, table.keys)
    assert program is not None
    record = a_create(table, rng)
    value = encode(table.schema, record, 1)
    assert program.decode(value, 5) is not None
    assert program.decode(value + b"\x00", 5) is None  # trailing bytes
    assert program.decode(value[:-1], 5) is None  # truncated
    assert program.decode(value, 6) is None  # not at the start of the body


@pytest.mark.parametrize(
    "column",
    [
        {"type": "fixed", "name": "F", "size": 4},
        {"type": "array", "items": {"type": "array", "items": "long"}},
        {"type": "array", "items": {"type": "map", "values": "long"}},
        {"type": "map", "values": "long"},
        ["null", "long", "string"],
        {"type": "long", "logicalType": "timestamp-nanos"},
    ],
)
def test_a_schema_with_a_column_of_another_kind_has_no_program(column: Any) -> None:
    table = random_table(random.Random(3), 3)
    after = table.schema["fields"][6]["type"][1]
    after["fields"].append({"name": "other", "type": column})
    assert change_program(table.schema, table.keys) is None
    del after["fields"][-1]
    assert change_program(table.schema, table.keys) is not None


def test_an_encoded_row_reads_as_the_decoders_dict() -> None:
    decoded = {"id": 1, "name": "x"}
    calls: list[int] = []

    def decode() -> dict[str, Any]:
        calls.append(1)
        return decoded

    row = EncodedRow(None, b"", 0, decode)
    assert dict(row) == decoded and row["name"] == "x" and row.get("none") is None
    assert len(row) == 2 and "id" in row and calls == [1]
