"""Metrics parsing, histogram quantiles and rates across service restarts."""

from __future__ import annotations

import socket
import threading

import pytest

from icefjord.demo.progress import (
    ProgressView,
    Scrape,
    bucket_delta,
    buckets,
    histogram_quantile,
    parse_metrics,
    render,
    scrape_all,
    total,
    with_instances_merged,
)

pytestmark = pytest.mark.unit


def writer_text(applied: float, fresh: dict[str, float], lag: float = 0) -> str:
    lines = [
        "# TYPE icefjord_writer_changes_applied_total counter",
        f'icefjord_writer_changes_applied_total{{table="shop.a",op="CREATE"}} {applied}',
        f'icefjord_writer_changes_applied_total{{table="shop.b",op="UPDATE"}} {applied}',
        "# TYPE icefjord_writer_consumer_lag gauge",
        f'icefjord_writer_consumer_lag{{topic="t",partition="0"}} {lag}',
        "# TYPE icefjord_writer_freshness_seconds histogram",
    ]
    for le, count in fresh.items():
        lines.append(
            f'icefjord_writer_freshness_seconds_bucket{{table="shop.a",le="{le}"}} {count}'
        )
    lines.append(f'icefjord_writer_freshness_seconds_count{{table="shop.a"}} {fresh["+Inf"]}')
    lines.append('icefjord_writer_freshness_seconds_sum{table="shop.a"} 1.0')
    return "\n".join(lines) + "\n"


def test_parse_and_total_and_buckets() -> None:
    samples = parse_metrics(writer_text(5, {"1.0": 2, "5.0": 4, "+Inf": 4}, lag=3))
    assert total(samples, "icefjord_writer_changes_applied_total") == 10
    assert (
        total(
            samples,
            "icefjord_writer_changes_applied_total",
            lambda labels: labels["table"] == "shop.b",
        )
        == 5
    )
    assert total(samples, "icefjord_writer_consumer_lag") == 3
    assert total(samples, "absent_total") is None
    assert buckets(samples, "icefjord_writer_freshness_seconds") == (
        (1.0, 2.0),
        (5.0, 4.0),
        (float("inf"), 4.0),
    )


@pytest.mark.parametrize(
    ("q", "expected"),
    [(0.5, 1.0), (0.25, 0.5), (0.75, 3.0), (1.0, 5.0)],
)
def test_histogram_quantile_interpolates_like_prometheus(q: float, expected: float) -> None:
    assert histogram_quantile(q, ((1.0, 2.0), (5.0, 4.0), (float("inf"), 4.0))) == expected


def test_histogram_quantile_edges() -> None:
    assert histogram_quantile(0.5, ()) is None
    assert histogram_quantile(0.5, ((1.0, 0.0), (float("inf"), 0.0))) is None
    assert histogram_quantile(0.99, ((1.0, 1.0), (float("inf"), 10.0))) == 1.0


def test_bucket_delta_detects_a_reset() -> None:
    before = ((1.0, 5.0), (float("inf"), 9.0))
    assert bucket_delta(((1.0, 7.0), (float("inf"), 12.0)), before) == (
        (1.0, 2.0),
        (float("inf"), 3.0),
    )
    restarted = ((1.0, 1.0), (float("inf"), 1.0))
    assert bucket_delta(restarted, before) == restarted


def scrape(at: float, source: int, writer: str | None) -> Scrape:
    return Scrape(at, {"writer": None if writer is None else parse_metrics(writer)}, source)


def test_rates_and_totals_survive_a_writer_restart() -> None:
    view = ProgressView(window_s=100)
    view.add(scrape(0, 0, writer_text(100, {"1.0": 10, "+Inf": 10})))
    view.add(scrape(10, 500, writer_text(300, {"1.0": 30, "+Inf": 40})))
    assert view.rate("source") == 50
    assert view.rate("applied") == 40  # (600 - 200) / 10
    view.add(scrape(20, 900, None))  # killed
    view.add(scrape(30, 1200, writer_text(50, {"1.0": 5, "+Inf": 5})))  # restarted from zero
    assert view.count("applied") == 600 + 100
    assert view.freshness_overall(0.5) is not None
    # 45 observations in total: 35 at <= 1 s, 10 above.
    assert view.freshness_overall(0.5) == pytest.approx(45 / 2 / 35)
    assert view.writer_lag() == 0
    assert view.tables() == 2
    table = render(view, "test")
    assert table.row_count > 5


def test_freshness_window_prefers_recent_observations() -> None:
    view = ProgressView(window_s=5)
    view.add(scrape(0, 0, writer_text(1, {"1.0": 100, "10.0": 100, "+Inf": 100})))
    view.add(scrape(10, 0, writer_text(1, {"1.0": 100, "10.0": 110, "+Inf": 110})))
    assert view.freshness(0.5) == pytest.approx(5.5)  # only the 10 slow ones are recent


def test_a_service_killed_while_answering_counts_as_not_answering() -> None:
    """A response cut short (Content-Length promised, connection closed) is not an error."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def answer_half() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(4096)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 13740\r\n\r\n# TYPE")

        thread = threading.Thread(target=answer_half)
        thread.start()
        result = scrape_all({"writer": f"http://127.0.0.1:{port}"}, 7)
        thread.join()
    assert result.services == {"writer": None}
    assert result.source_changes == 7


def test_a_second_writer_instances_samples_count_with_the_first() -> None:
    first = parse_metrics(
        'icefjord_writer_changes_applied_total{table="a.t",op="c"} 5\n'
        'icefjord_writer_freshness_seconds_bucket{table="a.t",le="1.0"} 2\n'
    )
    second = parse_metrics(
        'icefjord_writer_changes_applied_total{table="a.t",op="c"} 7\n'
        'icefjord_writer_freshness_seconds_bucket{table="a.t",le="1.0"} 3\n'
    )
    merged = with_instances_merged({"writer": first, "writer-2": second, "normalizer": None})
    writer = merged["writer"]
    assert writer is not None
    assert total(writer, "icefjord_writer_changes_applied_total") == 12
    assert buckets(writer, "icefjord_writer_freshness_seconds") == ((1.0, 5.0),)
    assert merged["writer-2"] is second and merged["normalizer"] is None
    # The first instance down: nothing to add the second to, each stays as it was.
    assert with_instances_merged({"writer": None, "writer-2": second})["writer"] is None
