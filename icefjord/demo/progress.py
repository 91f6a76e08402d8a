"""Live progress of the pipeline, read from the services' ``/metrics`` endpoints.

:func:`parse_metrics` and :func:`histogram_quantile` are pure (Prometheus text in, numbers
out); :class:`ProgressView` keeps a short history of scrapes to turn counters into rates and
the writer's freshness histogram into recent p50/p99, tolerating counters that restart from
zero when a service is killed and restarted; :func:`render` draws it with rich.
"""

from __future__ import annotations

import http.client
import math
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from rich.table import Table

from shared.events import MaintenanceAction, MaintenanceStatus

Labels = tuple[tuple[str, str], ...]
Samples = dict[str, list[tuple[Labels, float]]]

FRESHNESS = "icefjord_writer_freshness_seconds"


def parse_metrics(text: str) -> Samples:
    """Prometheus text exposition -> sample name -> [(sorted labels, value)]."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            out.setdefault(sample.name, []).append((labels, float(sample.value)))
    return out


def total(
    samples: Samples, name: str, where: Callable[[dict[str, str]], bool] | None = None
) -> float | None:
    """Sum of a metric's samples (optionally filtered by labels); None when absent."""
    values = [v for labels, v in samples.get(name, []) if where is None or where(dict(labels))]
    return sum(values) if values else None


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(labels)[label] for labels, _ in samples.get(name, []) if label in dict(labels)}


def buckets(samples: Samples, histogram: str) -> tuple[tuple[float, float], ...]:
    """Cumulative ``(upper bound, count)`` of a histogram, summed over its other labels."""
    sums: dict[float, float] = {}
    for labels, value in samples.get(f"{histogram}_bucket", []):
        bound = float(dict(labels)["le"])
        sums[bound] = sums.get(bound, 0.0) + value
    return tuple(sorted(sums.items()))


def bucket_delta(
    now: Sequence[tuple[float, float]], before: Sequence[tuple[float, float]]
) -> tuple[tuple[float, float], ...]:
    """Observations between two scrapes; ``now`` alone if the histogram was reset."""
    earlier = dict(before)
    delta = tuple((bound, count - earlier.get(bound, 0.0)) for bound, count in now)
    if any(count < 0 for _, count in delta):
        return tuple(now)
    return delta


def histogram_quantile(q: float, cumulative: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' ``histogram_quantile``: linear interpolation inside the bucket holding
    rank ``q * count``; the highest finite bound if it falls in ``+Inf``; None if empty."""
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank = q * cumulative[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in cumulative:
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


@dataclass(frozen=True)
class Scrape:
    """One round of scrapes: service name -> parsed metrics (None: not answering)."""

    at: float
    services: Mapping[str, Samples | None]
    source_changes: int

    def get(self, service: str) -> Samples:
        return self.services.get(service) or {}


def scrape_all(endpoints: Mapping[str, str], source_changes: int, timeout_s: float = 2.0) -> Scrape:
    """Fetch ``<url>/metrics`` of every service.

    A service killed while it answers (the demo's faults do that) ends the response early:
    that is ``http.client.IncompleteRead``, not an ``OSError``, and counts as not answering.
    """
    services: dict[str, Samples | None] = {}
    for name, url in endpoints.items():
        try:
            with urllib.request.urlopen(f"{url}/metrics", timeout=timeout_s) as response:
                services[name] = parse_metrics(response.read().decode())
        except (OSError, http.client.HTTPException, ValueError):
            services[name] = None
    return Scrape(time.monotonic(), with_instances_merged(services), source_changes)


def with_instances_merged(services: Mapping[str, Samples | None]) -> dict[str, Samples | None]:
    """``services`` with the samples of each further instance of a service (``writer-2``,
    ``writer-3``: writers sharing the tables) added to the first's, each series labelled with
    its instance, so that sums and histograms cover every instance."""
    merged: dict[str, Samples | None] = dict(services)
    for name, samples in services.items():
        base, _, number = name.rpartition("-")
        if not number.isdigit() or base not in services or samples is None:
            continue
        first = merged[base]
        if first is None:
            continue
        combined = {key: list(values) for key, values in first.items()}
        for key, values in samples.items():
            combined.setdefault(key, []).extend(
                (tuple(sorted((*labels, ("instance", number)))), value) for labels, value in values
            )
        merged[base] = combined
    return merged


def is_compaction(labels: dict[str, str]) -> bool:
    """A data-file compaction that succeeded, in ``icefjord_maintenance_actions_total``."""
    return (
        labels.get("action") == MaintenanceAction.COMPACT_DATA_FILES
        and labels.get("status") == MaintenanceStatus.SUCCEEDED
    )


@dataclass
class ProgressView:
    """Scrape history (about ``window_s``) and counters carried across service restarts."""

    window_s: float = 15.0
    history: deque[Scrape] = field(default_factory=deque)
    _carried: dict[str, float] = field(default_factory=dict)
    _previous: dict[str, float] = field(default_factory=dict)
    _freshness: dict[float, float] = field(default_factory=dict)
    _previous_freshness: tuple[tuple[float, float], ...] = ()

    def add(self, scrape: Scrape) -> None:
        for key, value in self._counters(scrape).items():
            before = self._previous.get(key)
            step = value if before is None or value < before else value - before
            self._carried[key] = self._carried.get(key, 0.0) + step
            self._previous[key] = value
        if scrape.services.get("writer") is not None:
            now = buckets(scrape.get("writer"), FRESHNESS)
            for bound, count in bucket_delta(now, self._previous_freshness):
                self._freshness[bound] = self._freshness.get(bound, 0.0) + count
            self._previous_freshness = now
        self.history.append(scrape)
        while len(self.history) > 2 and scrape.at - self.history[1].at >= self.window_s:
            self.history.popleft()

    @staticmethod
    def _counters(scrape: Scrape) -> dict[str, float]:
        counters = {
            "normalized": total(scrape.get("normalizer"), "icefjord_normalizer_changes_out_total"),
            "dead_letters": total(
                scrape.get("normalizer"), "icefjord_normalizer_dead_letters_total"
            ),
            "applied": total(scrape.get("writer"), "icefjord_writer_changes_applied_total"),
            "compactions": total(
                scrape.get("maintainer"), "icefjord_maintenance_actions_total", is_compaction
            ),
        }
        return {k: v for k, v in counters.items() if v is not None}

    def count(self, key: str) -> float:
        """A counter's total since the view started, across restarts of its service."""
        return self._carried.get(key, 0.0)

    def rate(self, key: str) -> float | None:
        """Per-second rate of a counter over the window (``source`` for the workload)."""
        if key == "source":
            answered = list(self.history)
        else:
            # A scrape that timed out (a loaded machine, a killed service) has no counters.
            answered = [s for s in self.history if key in self._counters(s)]
        if len(answered) < 2:
            return None
        first, last = answered[0], answered[-1]
        seconds = last.at - first.at
        if seconds <= 0:
            return None
        if key == "source":
            return (last.source_changes - first.source_changes) / seconds
        before, after = self._counters(first)[key], self._counters(last)[key]
        return (after - before if after >= before else after) / seconds

    def freshness(self, q: float) -> float | None:
        """Quantile ``q`` of the writer's freshness over the window (since start if the
        window holds no observation)."""
        if not self.history:
            return None
        now = buckets(self.history[-1].get("writer"), FRESHNESS)
        recent = bucket_delta(now, buckets(self.history[0].get("writer"), FRESHNESS))
        value = histogram_quantile(q, recent)
        return value if value is not None else histogram_quantile(q, now)

    def freshness_overall(self, q: float) -> float | None:
        """Quantile ``q`` of the writer's freshness over every scrape so far, across restarts
        of the writer."""
        return histogram_quantile(q, tuple(sorted(self._freshness.items())))

    def latest_services(self) -> Mapping[str, Samples | None]:
        """The last scrape's services (None for one that did not answer)."""
        last = self.latest()
        return {} if last is None else last.services

    def latest(self) -> Scrape | None:
        return self.history[-1] if self.history else None

    def writer_lag(self) -> float | None:
        last = self.latest()
        return None if last is None else total(last.get("writer"), "icefjord_writer_consumer_lag")

    def normalizer_lag(self) -> float | None:
        last = self.latest()
        if last is None:
            return None
        return total(last.get("normalizer"), "icefjord_normalizer_consumer_lag")

    def tables(self) -> int:
        last = self.latest()
        if last is None:
            return 0
        names = label_values(last.get("writer"), "icefjord_writer_changes_applied_total", "table")
        names |= label_values(last.get("maintainer"), "icefjord_table_data_files", "table")
        if not names:
            names = label_values(
                last.get("normalizer"), "icefjord_normalizer_changes_out_total", "table"
            )
        return len(names)

    def data_files(self) -> float | None:
        last = self.latest()
        return None if last is None else total(last.get("maintainer"), "icefjord_table_data_files")


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def render(view: ProgressView, phase: str, extra: Sequence[tuple[str, str]] = ()) -> Table:
    """The live table: source and pipeline rates, freshness, lag, tables, files."""
    table = Table(title=f"Icefjord demo: {phase}", show_header=False, min_width=60)
    table.add_column("what", style="cyan")
    table.add_column("value", justify="right")
    last = view.latest()
    rows = [
        ("source changes", f"{last.source_changes:,}" if last else "-"),
        ("source changes/s", _fmt(view.rate("source"), ",.0f")),
        ("normalized changes/s", _fmt(view.rate("normalized"), ",.0f")),
        ("applied to Iceberg/s", _fmt(view.rate("applied"), ",.0f")),
        ("applied to Iceberg (total)", f"{view.count('applied'):,.0f}"),
        (
            "freshness p50 / p99",
            f"{_fmt(view.freshness(0.5), '.1f', ' s')} / {_fmt(view.freshness(0.99), '.1f', ' s')}",
        ),
        (
            "normalizer lag / writer lag",
            f"{_fmt(view.normalizer_lag(), ',.0f')} / {_fmt(view.writer_lag(), ',.0f')}",
        ),
        ("tables", str(view.tables())),
        ("data files", _fmt(view.data_files(), ",.0f")),
        ("compactions", f"{view.count('compactions'):,.0f}"),
        ("dead letters", f"{view.count('dead_letters'):,.0f}"),
    ]
    if last is not None:
        down = [name for name, samples in last.services.items() if samples is None]
        rows.append(("services not answering", ", ".join(down) if down else "none"))
    for what, value in [*rows, *extra]:
        table.add_row(what, value)
    return table
