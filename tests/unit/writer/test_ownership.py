"""Claims of a table's partitions by writer instances (``ownership.py``), and what a commit
records and checks with them (``Committer.recorded``, ``Committer.check_claims``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from services.iceberg_writer.batching import BatchClock
from services.iceberg_writer.committer import Committer
from services.iceberg_writer.ownership import (
    Owner,
    PartitionsMovedError,
    group_of,
    lost_claims,
    owner_key,
)
from services.iceberg_writer.state import TableState
from services.iceberg_writer.tables import FencedError

pytestmark = pytest.mark.unit

TOPIC = "icefjord.changes.shop.orders"


def test_a_claim_names_the_group_epoch_and_instance() -> None:
    owner = Owner("team/writers", 7, "abc")
    assert owner.claims([2, 0, 2]) == {
        owner_key(0): "team/writers/7/abc",
        owner_key(2): owner.token,
    }
    assert group_of(owner.token) == "team/writers"
    assert Owner.new("w", 7).token != Owner.new("w", 7).token, "two instances, one epoch"


def test_lost_claims_tell_a_move_in_the_group_from_another_groups_claim() -> None:
    me = Owner("writers", 1, "me")
    peer = Owner("writers", 2, "peer")
    other = Owner("blue-writers", 3, "x")
    properties = {**me.claims([0, 1]), **peer.claims([2]), **other.claims([3])}
    assert not lost_claims(properties, [0, 1], me)
    assert not lost_claims(properties, [4], me), "a partition nobody claimed is not lost"
    lost = lost_claims(properties, [0, 1, 2, 3], me)
    assert lost.moved == (2,)
    assert lost.taken == {3: other.token}


def _committer(owner: Owner) -> Committer:
    committer = Committer.__new__(Committer)
    committer.owner = owner
    return committer


def _state() -> TableState:
    return TableState(name="shop.orders", topic=TOPIC, clock=BatchClock(1.0, 0.1, 10))


def _table(properties: dict[str, str], summary: dict[str, str] | None = None) -> Any:
    snapshot = SimpleNamespace(
        snapshot_id=1,
        parent_snapshot_id=None,
        summary=SimpleNamespace(additional_properties=summary or {}),
    )
    return SimpleNamespace(properties=properties, current_snapshot=lambda: snapshot)


def test_a_commit_records_only_the_partitions_this_instance_claimed() -> None:
    state = _state()
    state.committed = {(TOPIC, 0): 10, (TOPIC, 1): 20, (TOPIC, 2): 30}  # 2: another's, stale
    state.claimed = {(TOPIC, 0), (TOPIC, 1)}
    state.consumed = {(TOPIC, 0): 15}
    assert _committer(Owner("w", 1, "a")).recorded(state) == {(TOPIC, 0): 15, (TOPIC, 1): 20}


def test_a_commit_of_a_partition_claimed_since_by_another_instance_is_refused() -> None:
    me, peer = Owner("w", 1, "a"), Owner("w", 2, "b")
    state = _state()
    state.claimed = {(TOPIC, 0), (TOPIC, 1)}
    committer = _committer(me)
    committer.check_claims(state, _table({**me.claims([0, 1]), **peer.claims([2])}))
    with pytest.raises(PartitionsMovedError, match=r"\[1\]"):
        committer.check_claims(state, _table({**me.claims([0]), **peer.claims([1])}))
    with pytest.raises(FencedError, match="another writer group"):
        committer.check_claims(state, _table({**me.claims([0]), **Owner("v", 3, "c").claims([1])}))


def test_a_newer_truncate_another_instance_recorded_is_taken() -> None:
    me = Owner("w", 1, "a")
    state = _state()
    state.truncated_at = "00000000000000000005"
    newer = {"icefjord.truncated-at": "00000000000000000009"}
    _committer(me).check_claims(state, _table({}, newer))
    assert state.truncated_at == "00000000000000000009"
    older = {"icefjord.truncated-at": "00000000000000000001"}
    _committer(me).check_claims(state, _table({}, older))
    assert state.truncated_at == "00000000000000000009"
