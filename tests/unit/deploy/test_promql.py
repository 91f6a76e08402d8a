"""The PromQL scanner finds every icefjord selector and its label matchers."""

from __future__ import annotations

import pytest
from deploycheck.contract import Contract
from deploycheck.promql import check_expr, selectors
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.unit

names = st.from_regex(r"icefjord_[a-z]{1,8}(_[a-z]{1,8}){0,3}", fullmatch=True)
labels = st.lists(st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True), max_size=4, unique=True)
values = st.text(alphabet=st.characters(blacklist_characters='"\\\n'), max_size=10)
operators = st.sampled_from(["=", "!=", "=~", "!~"])


@given(name=names, label_names=labels, data=st.data())
def test_selectors_inside_functions_and_aggregations_are_found(
    name: str, label_names: list[str], data: st.DataObject
) -> None:
    matchers = ", ".join(
        f'{label}{data.draw(operators)}"{data.draw(values)}"' for label in label_names
    )
    expr = f"sum by (table) (rate({name}{{{matchers}}}[$__rate_interval])) > 0"
    found, unreadable = selectors(expr)
    assert unreadable == []
    assert [(s.name, list(s.labels)) for s in found] == [(name, label_names)]


def test_strings_and_function_names_are_not_metrics() -> None:
    expr = 'label_replace(icefjord_writer_consumer_lag, "t", "$1", "topic", "icefjord_fake_(.+)")'
    assert [s.name for s in selectors(expr)[0]] == ["icefjord_writer_consumer_lag"]


def test_histogram_series_take_le_and_target_labels(contract: Contract) -> None:
    ok = 'icefjord_writer_freshness_seconds_bucket{table="a", le="+Inf", job="w"}'
    assert check_expr(ok, contract, frozenset()) == []
    assert check_expr('icefjord_writer_freshness_seconds_sum{le="1"}', contract, frozenset()) == [
        "metric icefjord_writer_freshness_seconds_sum has no label 'le' (has "
        "['instance', 'job', 'table'])"
    ]
    # A counter has no _bucket series.
    assert check_expr("icefjord_writer_commit_retries_total_bucket", contract, frozenset()) == [
        "metric icefjord_writer_commit_retries_total_bucket is not in the contract"
    ]


def test_recorded_names_are_accepted() -> None:
    recorded = frozenset({"icefjord:writer_freshness_seconds:p99_5m"})
    expr = 'icefjord:writer_freshness_seconds:p99_5m{table=~"$table"} > 10'
    assert check_expr(expr, Contract(services={}, metrics={}), recorded) == []


def test_equality_matchers_use_the_values_a_label_takes(contract: Contract) -> None:
    good = 'icefjord_maintenance_actions_total{status="FAILED", action=~"compact.*"}'
    assert check_expr(good, contract, frozenset()) == []
    assert check_expr(
        'icefjord_maintenance_actions_total{status!="failed"}', contract, frozenset()
    ) == [
        "metric icefjord_maintenance_actions_total: status='failed' is not a value it takes "
        "(['FAILED', 'REJECTED', 'SKIPPED', 'SUCCEEDED'])"
    ]
    # Grafana variables stand for values chosen at view time.
    assert check_expr('icefjord_table_delete_files{kind="$kind"}', contract, frozenset()) == []
