"""Request validation: malformed identifiers, scopes and options are rejected with a reason."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.maintainer.identifiers import Comparison, TableId
from services.maintainer.requests import (
    ALLOWED_OPTIONS,
    Rejection,
    ValidatedRequest,
    validate_request,
)
from shared.events import MaintenanceAction, MaintenanceRequest

pytestmark = pytest.mark.unit


def request(
    action: MaintenanceAction = MaintenanceAction.COMPACT_DATA_FILES,
    table: str = "shop.orders",
    partition: str | None = None,
    **options: str,
) -> MaintenanceRequest:
    return MaintenanceRequest(
        request_id="r1",
        table=table,
        action=action,
        partition=partition,
        options=options,
        reason="test",
        requested_by="operator:test",
    )


def test_a_valid_request_parses_its_table_scope_and_options() -> None:
    checked = validate_request(
        MaintenanceRequest(
            request_id="r1",
            table="shop.orders",
            action=MaintenanceAction.COMPACT_DATA_FILES,
            partition="region = 'eu'",
            options={
                "min-input-files": "2",
                "partial-progress.enabled": "TRUE",
                "delete-ratio-threshold": "0.25",
                "cache-delete-files": "true",
            },
            reason="test",
            requested_by="operator:test",
        )
    )
    assert isinstance(checked, ValidatedRequest)
    assert checked.table == TableId("shop", "orders")
    assert checked.scope is not None and checked.scope.terms == (Comparison("region", "=", "eu"),)
    assert checked.options == {
        "min-input-files": 2,
        "partial-progress.enabled": True,
        "delete-ratio-threshold": 0.25,
        "cache-delete-files": True,
    }


@pytest.mark.parametrize("table", ["orders", "shop.orders; DROP TABLE x", "a.b.c", "shop.`o`"])
def test_malformed_table_is_rejected(table: str) -> None:
    checked = validate_request(request(table=table))
    assert isinstance(checked, Rejection)
    assert "malformed table identifier" in checked.reason


def test_unknown_option_is_rejected_and_names_the_accepted_ones() -> None:
    checked = validate_request(request(**{"spark.sql.anything": "x"}))
    assert isinstance(checked, Rejection)
    assert "bad option 'spark.sql.anything'" in checked.reason
    assert "min-input-files" in checked.reason


@pytest.mark.parametrize(
    ("action", "key", "value"),
    [
        (MaintenanceAction.COMPACT_DATA_FILES, "min-input-files", "0"),
        (MaintenanceAction.COMPACT_DATA_FILES, "min-input-files", "two"),
        (MaintenanceAction.COMPACT_DATA_FILES, "target-file-size-bytes", "1' OR '1"),
        (MaintenanceAction.COMPACT_DATA_FILES, "rewrite-all", "yes"),
        (MaintenanceAction.COMPACT_DATA_FILES, "delete-ratio-threshold", "1.5"),
        (MaintenanceAction.COMPACT_DATA_FILES, "cache-delete-files", "on"),
        (MaintenanceAction.EXPIRE_SNAPSHOTS, "retain_last", "0"),
        (MaintenanceAction.EXPIRE_SNAPSHOTS, "older_than_ms", "-5"),
        (MaintenanceAction.REMOVE_ORPHAN_FILES, "dry_run", "maybe"),
    ],
)
def test_bad_option_values_are_rejected(action: MaintenanceAction, key: str, value: str) -> None:
    checked = validate_request(request(action, **{key: value}))
    assert isinstance(checked, Rejection)
    assert checked.reason.startswith(f"bad option {key}")


def test_options_of_another_action_are_rejected() -> None:
    checked = validate_request(request(MaintenanceAction.REWRITE_MANIFESTS, retain_last="3"))
    assert isinstance(checked, Rejection)
    assert "accepted: none" in checked.reason


@pytest.mark.parametrize(
    "action",
    [
        MaintenanceAction.EXPIRE_SNAPSHOTS,
        MaintenanceAction.REMOVE_ORPHAN_FILES,
        MaintenanceAction.REWRITE_MANIFESTS,
    ],
)
def test_partition_scope_only_where_the_action_has_one(action: MaintenanceAction) -> None:
    checked = validate_request(request(action, partition="region = 'eu'"))
    assert isinstance(checked, Rejection)
    assert "takes no partition scope" in checked.reason


def test_malformed_partition_filter_is_rejected() -> None:
    checked = validate_request(request(partition="region = 'eu' OR 1 = 1"))
    assert isinstance(checked, Rejection)
    assert checked.reason.startswith("bad partition filter")


def test_blank_partition_means_whole_table() -> None:
    checked = validate_request(request(partition="  "))
    assert isinstance(checked, ValidatedRequest) and checked.scope is None


@given(
    st.sampled_from(list(MaintenanceAction)),
    st.dictionaries(st.text(max_size=30), st.text(max_size=20), max_size=4),
)
def test_accepted_options_are_always_allow_listed(
    action: MaintenanceAction, options: dict[str, str]
) -> None:
    # Built directly: an option named like one of request()'s parameters ("action") is a
    # key like any other here.
    checked = validate_request(replace(request(action), options=options))
    if isinstance(checked, ValidatedRequest):
        assert set(checked.options) <= set(ALLOWED_OPTIONS[action])
    else:
        assert any(key not in ALLOWED_OPTIONS[action] for key in options) or "bad option" in (
            checked.reason
        )
