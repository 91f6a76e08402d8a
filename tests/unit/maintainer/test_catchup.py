"""When a rewrite waits for the writer to catch up: the pure rule."""

from __future__ import annotations

import pytest

from services.maintainer.catchup import CatchUpRule, hold_reason, writer_lag_ms
from services.maintainer.policy import Candidate
from shared.events import CommitDone, MaintenanceAction

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
RULE = CatchUpRule(lag_s=30, max_pressure=3, max_wait_s=300)


def candidate(
    action: MaintenanceAction = MaintenanceAction.COMPACT_DATA_FILES, pressure: float = 1.5
) -> Candidate:
    return Candidate("shop.orders", action, "small-files", pressure, "150 small files")


def behind(lag_s: float) -> int:
    return int(lag_s * 1000)


def test_rewrites_wait_while_the_writer_is_behind() -> None:
    for action in (
        MaintenanceAction.COMPACT_DATA_FILES,
        MaintenanceAction.REWRITE_POSITION_DELETES,
    ):
        why = hold_reason(candidate(action), behind(45), None, RULE, NOW)
        assert why is not None and "45 s behind" in why and "now 1.50" in why


@pytest.mark.parametrize(
    ("action", "lag", "waiting_since", "pressure", "rule"),
    [
        # Expiry, manifests and orphans take no rewrite lease: they never wait.
        (MaintenanceAction.EXPIRE_SNAPSHOTS, behind(45), None, 1.5, RULE),
        (MaintenanceAction.REWRITE_MANIFESTS, behind(45), None, 1.5, RULE),
        # No lag known (or the writer idle: the service passes None), or the writer keeping up.
        (MaintenanceAction.COMPACT_DATA_FILES, None, None, 1.5, RULE),
        (MaintenanceAction.COMPACT_DATA_FILES, behind(29.9), None, 1.5, RULE),
        # Too far over the trigger, or waited long enough.
        (MaintenanceAction.COMPACT_DATA_FILES, behind(45), None, 3.0, RULE),
        (MaintenanceAction.COMPACT_DATA_FILES, behind(45), NOW - 300_000, 1.5, RULE),
        # Off.
        (MaintenanceAction.COMPACT_DATA_FILES, behind(45), None, 1.5, CatchUpRule(lag_s=0)),
    ],
)
def test_what_does_not_wait(
    action: MaintenanceAction,
    lag: int | None,
    waiting_since: int | None,
    pressure: float,
    rule: CatchUpRule,
) -> None:
    assert hold_reason(candidate(action, pressure), lag, waiting_since, rule, NOW) is None


def test_a_wait_short_of_the_limit_goes_on() -> None:
    assert hold_reason(candidate(), behind(45), NOW - 299_000, RULE, NOW) is not None


def commit(committed_ms: int, watermark_ms: int | None) -> CommitDone:
    return CommitDone(
        table="shop.orders",
        commit_id="c",
        snapshot_id=1,
        writer_epoch=1,
        records=1,
        inserted=1,
        updated=0,
        deleted=0,
        data_files_added=1,
        delete_files_added=0,
        bytes_added=1,
        watermark_ms=watermark_ms,
        committed_at_ms=committed_ms,
        duration_ms=1,
    )


def test_the_lag_is_the_age_of_the_newest_change_a_commit_applied() -> None:
    assert writer_lag_ms(commit(NOW, NOW - 42_000)) == 42_000
    assert writer_lag_ms(commit(NOW, NOW + 1_000)) == 0  # clock skew
    assert writer_lag_ms(commit(NOW, None)) is None


def test_rule_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="max_pressure"):
        CatchUpRule(max_pressure=0.5)
    with pytest.raises(ValueError, match="negative"):
        CatchUpRule(lag_s=-1)
