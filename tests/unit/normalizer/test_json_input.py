"""JsonConverter input: the schema-prefix cache gives exactly what parsing the whole text with
``json.loads(parse_float=Decimal)`` gives, or the same error."""

from __future__ import annotations

import decimal
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.cdc_normalizer.envelope import _SchemaPrefixes, _split_schema
from services.cdc_normalizer.errors import NormalizeError

pytestmark = pytest.mark.unit

BLOCK = {
    "type": "struct",
    "optional": False,
    "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "payload"},  # the token inside S
    ],
}
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**80), 2**80),
    st.decimals(allow_nan=False, allow_infinity=False).map(str).map(decimal.Decimal),
    st.text(max_size=6),
    st.sampled_from(["\ud800", "a\udfff"]),  # json.dumps escapes them; msgspec refuses them
)
PAYLOADS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)
SEPARATORS = st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")])


def _number(value: Any) -> str:
    return f"@number:{value}@"


def render(payload: Any, separators: tuple[str, str], block: Any = BLOCK) -> bytes:
    """JsonConverter-shaped bytes; a Decimal is written as its JSON number (1.50, 1E+5)."""
    text = json.dumps({"schema": block, "payload": payload}, separators=separators, default=_number)
    return re.sub(r'"@number:([^@]*)@"', r"\1", text).encode()


def reference(raw: bytes, what: str) -> tuple[str, Any]:
    """The full path without fast paths: whole-text json.loads, then the schema/payload split."""
    try:
        value = json.loads(raw, parse_float=decimal.Decimal)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return ("raised", f"{what} is not JSON: {exc}")
    try:
        return ("ok", _split_schema(value, None, what))
    except NormalizeError as exc:
        return ("raised", exc.message)


def actual(cache: _SchemaPrefixes, raw: bytes) -> tuple[str, Any]:
    try:
        return ("ok", cache.split(raw, None))
    except NormalizeError as exc:
        return ("raised", exc.message)


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, decimal.Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


DAMAGE = st.sampled_from(
    [
        *(b"", b" ", b"x", b"}", b',"extra":1}', b"\xff", b'"', b"]", b"\n\t", b"NaN"),
        # what json and msgspec could read differently: a control character, a lone
        # surrogate (escaped and as bytes), non-standard numbers
        *(b"\x01", b'"\\ud800"', b"\xed\xa0\x80", b"Infinity", b"1e999"),
    ]
)


@settings(max_examples=200)
@given(
    records=st.lists(st.tuples(PAYLOADS, SEPARATORS), min_size=2, max_size=4),
    damage=DAMAGE,
    where=st.integers(0, 3),
)
def test_prefix_hits_equal_the_full_parse(
    records: list[tuple[Any, tuple[str, str]]], damage: bytes, where: int
) -> None:
    cache = _SchemaPrefixes("value")
    raws = [render(payload, separators) for payload, separators in records]
    # Damage a record after its prefix is known: before the closing brace, in the middle,
    # at the start, or in place of the closing brace.
    last = raws[-1]
    if where == 3:
        raws.append(last[:-1] + damage)
    else:
        cut = len(last) - 1 if where == 0 else len(last) // 2 if where == 1 else 1
        raws.append(last[:cut] + damage + last[cut:])
    for raw in raws:
        expected, got = reference(raw, "value"), actual(cache, raw)
        assert got[0] == expected[0], (raw, got, expected)
        if expected[0] == "ok":
            (payload, schema), (want_payload, want_schema) = got[1], expected[1]
            assert same(payload, want_payload) and schema == want_schema
        else:
            assert got[1] == expected[1]


def test_a_known_prefix_is_not_parsed_again() -> None:
    cache = _SchemaPrefixes("key")
    first = cache.split(render({"id": 1}, (",", ":")), None)
    second = cache.split(render({"id": 2}, (",", ":")), None)
    assert first[0] == {"id": 1} and second[0] == {"id": 2}
    assert first[1] is second[1]  # the ConnectSchema remembered with the prefix
    other = cache.split(render({"id": 3}, (",", ":"), block=None), None)
    assert other == ({"id": 3}, None)


def test_a_prefix_differing_only_in_whitespace_after_payload_is_not_a_hit() -> None:
    cache = _SchemaPrefixes("value")
    block = json.dumps(BLOCK, separators=(",", ":"))
    learned = f'{{"schema":{block},"payload"   :   {{"id": 1}}}}'.encode()
    tight = f'{{"schema":{block},"payload":12345678}}'.encode()
    for raw in (learned, tight):
        assert actual(cache, raw) == reference(raw, "value")
    assert cache.split(tight, None)[0] == 12345678
