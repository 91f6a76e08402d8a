"""observe_many leaves a histogram as observing each value would."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from shared.histograms import observe_many

pytestmark = pytest.mark.unit

BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


def histograms(labelled: bool) -> tuple[CollectorRegistry, Histogram, Histogram]:
    registries = CollectorRegistry(), CollectorRegistry()
    labels = ["table"] if labelled else []
    one, many = (Histogram("h", "h", labels, buckets=BUCKETS, registry=r) for r in registries)
    if labelled:
        one, many = one.labels("t"), many.labels("t")
    return registries, one, many  # type: ignore[return-value]


values = st.lists(
    st.one_of(
        st.sampled_from([0.0, *BUCKETS, 30.000001]),
        st.floats(min_value=0, max_value=1e6, allow_nan=False),
        st.floats(allow_nan=True, allow_infinity=True),
    ),
    max_size=60,
)


@given(first=values, second=values, labelled=st.booleans())
def test_the_same_counts_and_sum_as_observing_each(
    first: list[float], second: list[float], labelled: bool
) -> None:
    (r_one, r_many), one, many = histograms(labelled)
    for batch in (first, second):
        for value in batch:
            one.observe(value)
        observe_many(many, batch)
    expected, actual = samples(r_one), samples(r_many)
    assert expected.keys() == actual.keys()
    for name, value in expected.items():
        if name[0] == "h_sum":
            assert math.isclose(actual[name], value, rel_tol=1e-9) or (
                math.isnan(value) and math.isnan(actual[name])
            )
        else:
            assert actual[name] == value, name


def test_an_empty_batch_changes_nothing() -> None:
    (r_one, r_many), _, many = histograms(False)
    observe_many(many, [])
    assert samples(r_many) == samples(r_one)
