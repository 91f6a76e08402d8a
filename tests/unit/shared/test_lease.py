"""shared.lease: when the writer holds back its commits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.lease import LEASE_PROPERTY, lease_until_ms, leased

pytestmark = pytest.mark.unit


def test_no_property_no_lease() -> None:
    assert lease_until_ms({"write.format.default": "parquet"}) is None
    assert not leased({}, 1_000)


@given(st.integers(0, 2**42), st.integers(0, 2**42))
def test_leased_exactly_until_its_end(until: int, now: int) -> None:
    properties = {LEASE_PROPERTY: str(until)}
    assert lease_until_ms(properties) == until
    assert leased(properties, now) is (now < until)


@pytest.mark.parametrize("raw", ["", "soon", "1.5e12", "12 ms"])
def test_an_unreadable_lease_never_stops_the_writer(raw: str) -> None:
    assert lease_until_ms({LEASE_PROPERTY: raw}) is None
    assert not leased({LEASE_PROPERTY: raw}, 0)
