"""Shared helpers for the contract tests: values of any Avro schema, and Avro round trips."""

from __future__ import annotations

import datetime as dt
import functools
import io
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from fastavro.schema import expand_schema
from hypothesis import strategies as st

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
_UTC = dt.UTC


def _logical(node: dict[str, Any]) -> st.SearchStrategy[Any] | None:
    logical = node.get("logicalType")
    if logical == "decimal":
        bound = 10 ** node["precision"] - 1
        scale = node.get("scale", 0)
        return st.integers(-bound, bound).map(lambda n: Decimal(n).scaleb(-scale))
    if logical == "date":
        return st.dates()
    if logical == "time-micros":
        return st.times()
    if logical == "timestamp-micros":
        return st.datetimes(
            min_value=dt.datetime(1900, 1, 1),
            max_value=dt.datetime(2200, 1, 1),
            timezones=st.just(_UTC),
        )
    if logical == "local-timestamp-micros":
        return st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1))
    if logical == "uuid":
        return st.uuids()
    return None


_PRIMITIVE_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(*INT32),
    "long": st.integers(*INT64),
    "float": st.floats(width=32, allow_nan=False),
    "double": st.floats(allow_nan=False),
    "bytes": st.binary(max_size=16),
    "string": st.text(max_size=16),
}


def _values(node: Any) -> st.SearchStrategy[Any]:
    """Values fastavro writes for an expanded schema node; record branches of unions come as
    ``(full name, record)``, which is also what fastavro reads with return_record_name=True."""
    if isinstance(node, str):
        return _PRIMITIVE_VALUES[node]
    if isinstance(node, list):
        return st.one_of([_union_branch(branch) for branch in node])
    kind = node["type"]
    if not isinstance(kind, str):
        return _values(kind)
    logical = _logical(node)
    if logical is not None:
        return logical
    if kind in _PRIMITIVE_VALUES:
        return _PRIMITIVE_VALUES[kind]
    if kind == "record":
        return st.fixed_dictionaries({f["name"]: _values(f["type"]) for f in node["fields"]})
    if kind == "enum":
        return st.sampled_from(node["symbols"])
    if kind == "array":
        return st.lists(_values(node["items"]), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=8), _values(node["values"]), max_size=3)
    if kind == "fixed":
        return st.binary(min_size=node["size"], max_size=node["size"])
    raise AssertionError(f"unsupported Avro type {kind!r}")


def _union_branch(branch: Any) -> st.SearchStrategy[Any]:
    if isinstance(branch, dict) and branch.get("type") == "record":
        return _values(branch).map(lambda value: (branch["name"], value))
    return _values(branch)


def avro_values(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Hypothesis strategy of values valid for ``schema`` (a JSON dict, names resolved)."""
    return _values(expand_schema(schema))


@functools.lru_cache(maxsize=64)
def _parse(schema_json: str) -> Any:
    return fastavro.parse_schema(json.loads(schema_json))


def _parsed(schema: dict[str, Any]) -> Any:
    return _parse(json.dumps(schema, sort_keys=True))


def write(schema: dict[str, Any], value: Any) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, _parsed(schema), value)
    return buffer.getvalue()


def read(data: bytes, writer: dict[str, Any], reader: dict[str, Any] | None = None) -> Any:
    return fastavro.schemaless_reader(
        io.BytesIO(data),
        _parsed(writer),
        None if reader is None else _parsed(reader),
        return_record_name=True,
    )


class AvroKit:
    """What the contract tests share, handed out by the ``avro`` fixture."""

    values: Callable[[dict[str, Any]], st.SearchStrategy[Any]] = staticmethod(avro_values)
    write: Callable[[dict[str, Any], Any], bytes] = staticmethod(write)
    read: Callable[..., Any] = staticmethod(read)


@pytest.fixture(scope="session")
def avro() -> AvroKit:
    return AvroKit()
