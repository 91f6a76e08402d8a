"""Postgres ``sequence`` read without a JSON parse gives the same position as the JSON path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.cdc_normalizer import position
from services.cdc_normalizer.errors import InvalidPosition

pytestmark = pytest.mark.unit

ITEMS = st.one_of(
    st.integers(0, 10**21).map(lambda n: json.dumps(str(n))),
    st.integers(0, 10**6).map(str),
    st.sampled_from(["null", '"0/16B3748"', '"-1"', '"1.5"', '"٣"', '""', '" 7"', '"\\u0031"']),
)
SEQUENCES = st.one_of(
    st.builds(
        lambda a, b, left, right: f"[{left}{a}{right},{left}{b}{right}]",
        ITEMS,
        ITEMS,
        st.sampled_from(["", " ", "\n", "\x0c"]),
        st.sampled_from(["", " ", "\t"]),
    ),
    st.text(alphabet='[]",0123456789 ', max_size=12),
)


def outcome(source: dict[str, Any]) -> tuple[str, Any]:
    try:
        found = position.source_position(source, ts_ms=1, partition=0, offset=0)
        return ("ok", (found.components, found.kind))
    except InvalidPosition as exc:
        return ("raised", exc.message)


@given(sequence=SEQUENCES, tx_id=st.one_of(st.none(), st.integers(0, 10**6)))
def test_fast_sequence_equals_the_json_path(sequence: str, tx_id: int | None) -> None:
    source = {"connector": "postgresql", "sequence": sequence, "txId": tx_id, "lsn": 5}
    fast = outcome(source)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(position, "_plain_sequence", lambda text: None)
        assert outcome(source) == fast
