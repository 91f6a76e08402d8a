"""Many observations of one Prometheus histogram at once.

The normalizer observes a latency per record and the writer a freshness per change, tens of
thousands a second under load. ``Histogram.observe`` takes the child's locks and walks the
bucket bounds for every value (1.5 us each); :func:`observe_many` sorts a batch's values into
the buckets first and then adds one count per bucket and one sum. A scrape sees what the
same values observed one by one would show: the same counts, and the same sum up to the
rounding of adding the batch's values first. It reads the bounds and counters
``prometheus_client`` keeps on a child (the version is pinned, and
``tests/unit/shared/test_histograms.py`` compares the two exposition texts).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client import Histogram

__all__ = ["observe_many"]


def observe_many(histogram: Histogram, values: Iterable[float]) -> None:
    """``histogram.observe(v)`` for each of ``values``; ``histogram`` is a child (labelled, or
    a histogram without labels). A value that is not a finite number is observed alone."""
    bounds: list[float] = histogram._upper_bounds
    counts = [0] * len(bounds)
    total = 0.0
    for value in values:
        if not math.isfinite(value):
            histogram.observe(value)
            continue
        counts[bisect_left(bounds, value)] += 1  # the first bound with value <= bound
        total += value
    if not any(counts):
        return
    histogram._raise_if_not_observable()  # type: ignore[no-untyped-call]
    histogram._sum.inc(total)
    for index, count in enumerate(counts):
        if count:
            histogram._buckets[index].inc(count)
