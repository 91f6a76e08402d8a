"""A change's ``source`` map: every non-null source field as text and the origin coordinates,
sorted by name, whatever the source block's field order and however often it repeats."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.cdc_normalizer.envelope import Envelope
from services.cdc_normalizer.normalize import Origin, _source_map, _source_text

pytestmark = pytest.mark.unit

NAMES = st.sampled_from(
    ["connector", "db", "lsn", "txId", "ts_ms", "xmin", "sequence", "origin_topic", "a", "zz"]
)
VALUES = st.one_of(
    st.none(),
    st.text(max_size=4),
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
)


def expected(source: dict[str, Any], origin: Origin, kind: str) -> dict[str, str]:
    mapped = {k: _source_text(v) for k, v in source.items() if v is not None}
    mapped |= {
        "position_kind": kind,
        "origin_topic": origin.topic,
        "origin_partition": str(origin.partition),
        "origin_offset": str(origin.offset),
    }
    if origin.timestamp_ms is not None:
        mapped["origin_timestamp_ms"] = str(origin.timestamp_ms)
    return dict(sorted(mapped.items()))


def envelope(source: dict[str, Any]) -> Envelope:
    return Envelope("u", None, {}, None, source, None, None, None, False)


@given(
    sources=st.lists(st.dictionaries(NAMES, VALUES, max_size=8), min_size=1, max_size=4),
    offset=st.integers(0, 2**40),
    timestamp_ms=st.one_of(st.none(), st.integers(0, 2**42)),
)
def test_the_source_map_is_the_sorted_text_of_source_and_origin(
    sources: list[dict[str, Any]], offset: int, timestamp_ms: int | None
) -> None:
    origin = Origin("db.public.t", 2, offset, timestamp_ms)
    for source in [*sources, *sources]:  # the second time from the remembered order
        got = _source_map(envelope(source), origin, "postgresql")
        want = expected(source, origin, "postgresql")
        assert list(got.items()) == list(want.items())
