"""Batch planning: latest change per key, truncates, the write path and the next offsets.

The central property compares ``plan_batch`` + ``apply_to_model`` (what one commit does) with
a plain sequential reference that applies every change one by one in source order.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.iceberg_writer.changes import (
    BatchPlan,
    Change,
    Op,
    Path,
    PositionBounds,
    apply_to_model,
    offsets_after,
    plan_batch,
)

pytestmark = pytest.mark.unit

TABLE = "shop.orders"
TOPIC = "icefjord.changes.shop.orders"
Model = dict[tuple[Any, ...], tuple[str, Mapping[str, Any]]]


def pos(*parts: int) -> str:
    """A source position as the normalizer renders it: 20-digit components joined by '.'."""
    return ".".join(f"{p:020d}" for p in parts)


def change(
    op: Op,
    key: int | None,
    position: str,
    *,
    partition: int = 0,
    offset: int = 0,
    topic: str = TOPIC,
    label: str = "",
) -> Change:
    row = None
    if op not in (Op.DELETE, Op.TRUNCATE):
        row = {"id": key, "label": label or f"{op.value}@{position}"}
    return Change(
        table=TABLE,
        op=op,
        position=position,
        source_ts_ms=1_700_000_000_000,
        key=() if key is None else (key,),
        row=row,
        topic=topic,
        partition=partition,
        offset=offset,
        schema_id=1,
    )


def by_order(changes: Sequence[Change]) -> list[Change]:
    return sorted(changes, key=lambda c: c.order)


def sequential(model: Model, changes: Sequence[Change], truncated_at: str | None) -> Model:
    """The reference: each change in source order, guarded by the stored position."""
    out = dict(model)
    for c in sorted(changes, key=lambda c: (c.position, c.partition, c.offset)):
        if truncated_at is not None and c.position < truncated_at:
            continue
        if c.op is Op.TRUNCATE and c.position == truncated_at:
            continue  # the committed truncate, replayed: it emptied the table once already
        if c.op is Op.TRUNCATE:
            out.clear()
            continue
        held = out.get(c.key)
        if held is not None and c.position < held[0]:
            continue
        if c.op is Op.DELETE:
            out.pop(c.key, None)
        else:
            assert c.row is not None
            out[c.key] = (c.position, c.row)
    return out


# -- generators -------------------------------------------------------------------------------

# Few keys and few distinct positions, so that collisions (same key, same position, a truncate
# between two changes of one key) are common. Positions of one or two components.
positions = st.one_of(
    st.integers(0, 12).map(pos),
    st.tuples(st.integers(0, 4), st.integers(0, 3)).map(lambda t: pos(*t)),
)
ops = st.sampled_from([Op.CREATE, Op.UPDATE, Op.DELETE, Op.READ] * 4 + [Op.TRUNCATE])


@st.composite
def deliveries(draw: st.DrawFn) -> list[Change]:
    """Distinct changes with unique (partition, offset), plus exact duplicates, shuffled.

    Restriction, and why: two *different* changes never share (partition, offset), because a
    Kafka record is identified by them; a redelivery is an exact copy. Without it a truncate
    and a row change could tie on the full sort key (position, partition, offset), and the
    result would depend on delivery order in the reference (stable sort) but not in the plan
    (the truncate cuts only what sorts strictly before it), a difference that cannot occur
    on real topics.

    The stale-insert-after-delete case needs no restriction *within* one batch: the reference
    applies changes in source order, so a stale insert is applied (or skipped) before the
    delete that follows it, and the plan keeps only the delete. The case where the two really
    differ is a stale insert arriving in a *later* batch, after the delete removed the row's
    stored position (README, "Known limits"); both the plan and the reference resurrect the
    row then, because a pre-filled model has no tombstones either.
    """
    events = draw(
        st.lists(
            st.tuples(ops, st.integers(1, 4), positions, st.integers(0, 2)),
            min_size=1,
            max_size=16,
        )
    )
    offsets = draw(
        st.lists(st.integers(0, 10_000), min_size=len(events), max_size=len(events), unique=True)
    )
    distinct = [
        change(op, None if op is Op.TRUNCATE else key, position, partition=p, offset=o)
        for (op, key, position, p), o in zip(events, offsets, strict=True)
    ]
    copies = draw(st.lists(st.sampled_from(distinct), max_size=5))
    return list(draw(st.permutations(distinct + copies)))


# A pre-filled table: each of the keys is stored, or not, at some position.
models = st.tuples(*[st.none() | positions for _ in range(4)]).map(
    lambda stored: {
        (k,): (p, {"label": f"stored@{p}"}) for k, p in enumerate(stored, start=1) if p is not None
    }
)
truncations = st.one_of(st.none(), st.none(), positions)  # mostly no committed truncate


# -- the model property -----------------------------------------------------------------------


@given(deliveries(), models, truncations)
@settings(max_examples=150)
def test_one_commit_of_the_plan_equals_applying_every_change_in_source_order(
    changes: list[Change], model: Model, truncated_at: str | None
) -> None:
    expected = sequential(model, changes, truncated_at)
    actual = dict(model)
    apply_to_model(actual, plan_batch(TABLE, changes, truncated_at))
    assert actual == expected


@given(deliveries(), models)
@settings(max_examples=60)
def test_consecutive_batches_equal_one_sequential_pass_when_batches_follow_source_order(
    changes: list[Change], model: Model
) -> None:
    # Cutting the source-ordered stream into batches (as a single partition would) and
    # committing them one after the other reaches the same table as one pass; the truncate
    # position carried from batch to batch is what the writer keeps in its checkpoint.
    ordered = sorted(changes, key=lambda c: c.order)
    actual = dict(model)
    truncated_at: str | None = None
    for start in range(0, len(ordered), 3):
        plan = plan_batch(TABLE, ordered[start : start + 3], truncated_at)
        apply_to_model(actual, plan)
        truncated_at = plan.truncate_position or truncated_at
    assert actual == sequential(model, changes, None)


# -- plan shape -------------------------------------------------------------------------------


@given(deliveries(), truncations)
@settings(max_examples=40)
def test_a_plan_holds_at_most_one_change_per_key_and_no_truncate(
    changes: list[Change], truncated_at: str | None
) -> None:
    plan = plan_batch(TABLE, changes, truncated_at)
    keys = [c.key for c in plan.changes]
    assert len(keys) == len(set(keys))
    assert all(c.op is not Op.DELETE and c.row is not None for c in plan.upserts)
    assert all(c.op is Op.DELETE for c in plan.deletes)
    assert all(c.op is not Op.TRUNCATE for c in plan.changes)
    assert plan.table == TABLE
    assert plan.changes == plan.upserts + plan.deletes


@given(deliveries(), truncations)
@settings(max_examples=40)
def test_each_key_keeps_its_latest_change_since_the_last_truncate(
    changes: list[Change], truncated_at: str | None
) -> None:
    live = [c for c in changes if truncated_at is None or c.position >= truncated_at]
    cut = max((c.order for c in live if c.op is Op.TRUNCATE), default=None)
    survivors = [c for c in live if c.op is not Op.TRUNCATE and (cut is None or c.order > cut)]
    latest: dict[tuple[Any, ...], Change] = {}
    for c in sorted(survivors, key=lambda c: c.order):
        latest[c.key] = c
    plan = plan_batch(TABLE, changes, truncated_at)
    assert {c.key: c for c in plan.changes} == latest


@given(deliveries(), truncations, st.randoms(use_true_random=False))
@settings(max_examples=40)
def test_the_plan_does_not_depend_on_delivery_order(
    changes: list[Change], truncated_at: str | None, rng: Any
) -> None:
    shuffled = list(changes)
    rng.shuffle(shuffled)
    a, b = plan_batch(TABLE, changes, truncated_at), plan_batch(TABLE, shuffled, truncated_at)
    assert by_order(a.upserts) == by_order(b.upserts)
    assert by_order(a.deletes) == by_order(b.deletes)
    assert (a.truncated, a.truncate_position) == (b.truncated, b.truncate_position)


@given(deliveries(), positions)
@settings(max_examples=40)
def test_truncated_at_drops_exactly_the_changes_positioned_before_it(
    changes: list[Change], truncated_at: str
) -> None:
    plan = plan_batch(TABLE, changes, truncated_at)
    assert all(c.position >= truncated_at for c in plan.changes)
    # ...and the committed truncate itself, replayed.
    later = [
        c
        for c in changes
        if c.position > truncated_at or (c.position == truncated_at and c.op is not Op.TRUNCATE)
    ]
    assert plan == plan_batch(TABLE, later)


@given(deliveries(), truncations)
@settings(max_examples=40)
def test_truncated_and_its_position_come_from_the_truncates_kept(
    changes: list[Change], truncated_at: str | None
) -> None:
    kept = [
        c.position
        for c in changes
        if c.op is Op.TRUNCATE and (truncated_at is None or c.position > truncated_at)
    ]
    plan = plan_batch(TABLE, changes, truncated_at)
    assert plan.truncated is bool(kept)
    assert plan.truncate_position == (max(kept) if kept else None)


def test_latest_change_by_position_wins_whatever_the_offsets() -> None:
    # Offsets disagree with positions (two partitions): the position decides.
    newer = change(Op.UPDATE, 1, pos(9), partition=0, offset=1, label="new")
    older = change(Op.UPDATE, 1, pos(5), partition=1, offset=800, label="old")
    plan = plan_batch(TABLE, [newer, older])
    assert plan.upserts == (newer,)


def test_a_later_delete_removes_an_insert_of_the_same_batch() -> None:
    insert = change(Op.CREATE, 1, pos(1), offset=0)
    delete = change(Op.DELETE, 1, pos(2), offset=1)
    plan = plan_batch(TABLE, [delete, insert])
    assert (plan.upserts, plan.deletes) == ((), (delete,))


def test_a_stale_insert_delivered_after_the_delete_is_dropped_within_the_batch() -> None:
    delete = change(Op.DELETE, 1, pos(7), partition=0, offset=3)
    stale = change(Op.CREATE, 1, pos(4), partition=1, offset=9)
    plan = plan_batch(TABLE, [delete, stale])
    assert plan.deletes == (delete,) and plan.upserts == ()
    model: Model = {(1,): (pos(5), {"label": "stored"})}
    apply_to_model(model, plan)
    assert model == {}


def test_equal_positions_are_ordered_by_partition_then_offset() -> None:
    first = change(Op.UPDATE, 1, pos(3), partition=0, offset=50, label="p0")
    second = change(Op.UPDATE, 1, pos(3), partition=1, offset=2, label="p1")
    third = change(Op.UPDATE, 2, pos(3), partition=0, offset=4, label="o4")
    fourth = change(Op.UPDATE, 2, pos(3), partition=0, offset=9, label="o9")
    plan = plan_batch(TABLE, [second, first, fourth, third])
    assert by_order(plan.upserts) == [fourth, second]


def test_a_replayed_copy_gives_the_same_row() -> None:
    original = change(Op.UPDATE, 1, pos(3), offset=10, label="x")
    plan = plan_batch(TABLE, [original, original, original])
    assert plan.upserts == (original,)
    assert plan.received == {Op.UPDATE: 3}


def test_a_truncate_drops_earlier_changes_even_when_they_arrive_late_on_another_partition() -> None:
    before = change(Op.CREATE, 1, pos(1), partition=0, offset=0)
    truncate = change(Op.TRUNCATE, None, pos(2), partition=0, offset=1)
    after = change(Op.CREATE, 2, pos(3), partition=0, offset=2)
    late = change(Op.UPDATE, 3, pos(1, 5), partition=1, offset=0)
    plan = plan_batch(TABLE, [truncate, after, late, before])
    assert plan.truncated and plan.truncate_position == pos(2)
    assert plan.upserts == (after,) and plan.deletes == ()
    model: Model = {(9,): (pos(99), {"label": "stored"})}
    apply_to_model(model, plan)
    assert model == {(2,): (pos(3), after.row)}


def test_the_latest_of_several_truncates_cuts() -> None:
    t1 = change(Op.TRUNCATE, None, pos(2), offset=1)
    mid = change(Op.CREATE, 1, pos(3), offset=2)
    t2 = change(Op.TRUNCATE, None, pos(4), offset=3)
    end = change(Op.CREATE, 2, pos(5), offset=4)
    plan = plan_batch(TABLE, [end, t2, mid, t1])
    assert plan.upserts == (end,)
    assert plan.truncate_position == pos(4)


def test_a_truncate_before_the_committed_truncate_is_ignored() -> None:
    old_truncate = change(Op.TRUNCATE, None, pos(2), partition=1, offset=5)
    row = change(Op.CREATE, 1, pos(6), offset=1)
    plan = plan_batch(TABLE, [old_truncate, row], truncated_at=pos(5))
    assert not plan.truncated and plan.truncate_position is None
    assert plan.upserts == (row,)


def test_an_empty_batch_plans_nothing() -> None:
    plan = plan_batch(TABLE, [])
    assert plan.changes == () and not plan.truncated and plan.truncate_position is None


# -- apply_to_model on its own ----------------------------------------------------------------


def test_apply_to_model_guards_by_the_stored_position() -> None:
    stale = change(Op.UPDATE, 1, pos(3))
    stale_delete = change(Op.DELETE, 2, pos(3))
    equal = change(Op.UPDATE, 3, pos(5), label="equal")
    model: Model = {
        (1,): (pos(5), {"label": "kept"}),
        (2,): (pos(5), {"label": "kept"}),
        (3,): (pos(5), {"label": "replaced"}),
    }
    apply_to_model(model, plan_batch(TABLE, [stale, stale_delete, equal]))
    assert model == {
        (1,): (pos(5), {"label": "kept"}),
        (2,): (pos(5), {"label": "kept"}),
        (3,): (pos(5), equal.row),
    }


# -- the write path ---------------------------------------------------------------------------


def plan_of(*ops: Op) -> BatchPlan:
    return plan_batch(
        TABLE,
        [
            change(op, None if op is Op.TRUNCATE else i, pos(i), offset=i)
            for i, op in enumerate(ops)
        ],
    )


# APPEND is chosen for any batch on an empty table (changes.py: "deletes of rows that do not
# exist are no-ops"; apply.py appends only the upserts). The brief and the README's "Apply"
# step 3 still say "and the batch deletes nothing"; the two properties below hold for both.
@pytest.mark.parametrize(
    ("ops", "empty", "expected"),
    [
        ((Op.READ, Op.READ), True, Path.APPEND),
        ((Op.CREATE, Op.UPDATE), True, Path.APPEND),
        ((), True, Path.APPEND),
        ((Op.CREATE, Op.UPDATE), False, Path.MERGE),
        ((Op.DELETE,), False, Path.MERGE),
        ((), False, Path.MERGE),
        ((Op.TRUNCATE,), True, Path.REPLACE),
        ((Op.TRUNCATE, Op.CREATE), False, Path.REPLACE),
        ((Op.TRUNCATE, Op.DELETE), True, Path.REPLACE),
    ],
)
def test_path_rules(ops: tuple[Op, ...], empty: bool, expected: Path) -> None:
    assert plan_of(*ops).path(table_is_empty=empty) is expected


@given(deliveries(), st.booleans())
@settings(max_examples=40)
def test_replace_exactly_on_truncate_and_append_never_on_a_table_with_rows(
    changes: list[Change], empty: bool
) -> None:
    plan = plan_batch(TABLE, changes)
    path = plan.path(empty)
    assert (path is Path.REPLACE) == plan.truncated
    if not empty:
        assert path is not Path.APPEND


@given(deliveries())
@settings(max_examples=40)
def test_appending_the_upserts_to_an_empty_table_equals_the_merge(changes: list[Change]) -> None:
    # What the APPEND path writes (the upserts, unguarded) must be what the commit means.
    plan = plan_batch(TABLE, changes)
    if plan.path(table_is_empty=True) is not Path.APPEND:
        return
    merged: Model = {}
    apply_to_model(merged, plan)
    appended = {c.key: (c.position, c.row) for c in plan.upserts}
    assert appended == merged


def test_insert_only_for_snapshot_reads_at_or_below_every_stored_position() -> None:
    reads = plan_of(Op.READ, Op.READ)  # positions pos(0), pos(1)
    assert reads.path(False, stored_floor=pos(1)) is Path.INSERT
    assert reads.path(False, stored_floor=pos(5)) is Path.INSERT
    # One read newer than some stored row: that row may need overwriting.
    assert reads.path(False, stored_floor=pos(0)) is Path.MERGE
    assert reads.path(False, stored_floor=None) is Path.MERGE  # floor unknown
    assert reads.path(True, stored_floor=pos(9)) is Path.APPEND
    for ops in [(Op.READ, Op.CREATE), (Op.READ, Op.UPDATE), (Op.READ, Op.DELETE), ()]:
        assert plan_of(*ops).path(False, stored_floor=pos(9)) is Path.MERGE, ops
    assert plan_of(Op.TRUNCATE, Op.READ).path(False, stored_floor=pos(9)) is Path.REPLACE


@st.composite
def snapshot_reads_on_a_table(draw: st.DrawFn) -> tuple[Model, list[Change]]:
    """A stored table and a batch of snapshot reads. Stored rows at the batch's own position
    are earlier deliveries of the same reads (same row), as when a snapshot is re-read;
    others are newer streaming changes."""
    snapshot_at = draw(st.integers(1, 5))
    keys = draw(st.lists(st.integers(0, 15), unique=True, max_size=12))
    batch = [
        change(Op.READ, k, pos(snapshot_at), offset=i, label=f"read {k}")
        for i, k in enumerate(keys)
    ]
    stored: Model = {}
    for k in draw(st.lists(st.integers(0, 15), unique=True, max_size=12)):
        if k in keys and draw(st.booleans()):
            stored[(k,)] = (pos(snapshot_at), {"id": k, "label": f"read {k}"})
        else:
            # Newer: a different row at the reads' own position would be a second source
            # event at one position of one key, which positions rule out (it fails here).
            at = draw(st.integers(snapshot_at + 1, 9))
            stored[(k,)] = (pos(at), {"id": k, "label": f"stream {k}@{at}"})
    return stored, batch


@given(snapshot_reads_on_a_table())
@settings(max_examples=80)
def test_inserting_only_missing_keys_equals_the_merge_when_insert_is_chosen(
    case: tuple[Model, list[Change]],
) -> None:
    stored, batch = case
    plan = plan_batch(TABLE, batch)
    floor = min((p for p, _ in stored.values()), default=None)
    if plan.path(not stored, floor) is not Path.INSERT:
        return
    merged = dict(stored)
    apply_to_model(merged, plan)
    inserted = dict(stored)
    for c in plan.upserts:
        inserted.setdefault(c.key, (c.position, c.row or {}))
    assert inserted == merged


# -- offsets ----------------------------------------------------------------------------------


def test_offsets_after_is_the_next_offset_per_topic_partition() -> None:
    changes = [
        change(Op.CREATE, 1, pos(1), partition=0, offset=5),
        change(Op.CREATE, 2, pos(2), partition=0, offset=9),
        change(Op.CREATE, 3, pos(3), partition=0, offset=3),
        change(Op.DELETE, 1, pos(4), partition=1, offset=0),
        change(Op.UPDATE, 2, pos(5), partition=0, offset=7, topic="other"),
    ]
    assert offsets_after(changes) == {(TOPIC, 0): 10, (TOPIC, 1): 1, ("other", 0): 8}
    assert offsets_after([]) == {}


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b.c", "x:y"]), st.integers(0, 3), st.integers(0, 10**9)),
        max_size=20,
    )
)
@settings(max_examples=40)
def test_offsets_after_covers_every_partition_seen_and_passes_every_offset(
    coordinates: list[tuple[str, int, int]],
) -> None:
    changes = [
        change(Op.UPDATE, 1, pos(1), topic=t, partition=p, offset=o) for t, p, o in coordinates
    ]
    out = offsets_after(changes)
    assert set(out) == {(t, p) for t, p, _ in coordinates}
    for t, p, o in coordinates:
        assert out[(t, p)] > o
        assert (t, p, out[(t, p)] - 1) in coordinates


def test_upsert_when_every_change_is_known_to_be_newer() -> None:
    plan = plan_of(Op.CREATE, Op.UPDATE)
    assert plan.path(False, newer=True) is Path.UPSERT
    assert plan.path(False, newer=False) is Path.MERGE
    assert plan.path(True, newer=True) is Path.APPEND  # nothing stored: a plain append
    assert plan_of(Op.TRUNCATE, Op.CREATE).path(False, newer=True) is Path.REPLACE
    reads = plan_of(Op.READ, Op.READ)
    assert reads.path(False, stored_floor=pos(5), newer=True) is Path.INSERT


def test_only_the_paths_that_delete_in_or_read_stored_files_wait_for_the_lease() -> None:
    # A rewrite fails over deletion vectors in its files (the MERGE's and the upsert
    # path's) or removed files; an append to an empty table only adds files.
    waiting = {path for path in Path if path.waits_for_lease}
    assert waiting == {Path.MERGE, Path.INSERT, Path.REPLACE, Path.UPSERT}


def test_bounds_admit_a_change_at_or_above_its_partitions_bound() -> None:
    bounds = PositionBounds(pos(5))
    assert bounds.admits([change(Op.UPDATE, 1, pos(5)), change(Op.UPDATE, 2, pos(6))])
    assert not bounds.admits([change(Op.UPDATE, 1, pos(4))])  # maybe older than base's rows
    bounds.record([change(Op.UPDATE, 1, pos(9), partition=0), change(Op.CREATE, 2, pos(7))])
    assert not bounds.admits([change(Op.UPDATE, 1, pos(8), partition=0)])  # a replay
    assert bounds.admits([change(Op.UPDATE, 3, pos(8), partition=1)])  # another partition
    assert not PositionBounds(None).admits([change(Op.UPDATE, 1, pos(99))])  # base unknown


def blind(model: Model, plan: BatchPlan) -> None:
    """What the UPSERT path writes: every key's stored row deleted, the upserts added."""
    for c in plan.changes:
        model.pop(c.key, None)
    for c in plan.upserts:
        assert c.row is not None
        model[c.key] = (c.position, c.row)


def write_both_ways(
    merged: Model, upserted: Model, bounds: PositionBounds, batch: list[Change]
) -> None:
    """``batch`` into ``merged`` by the guarded MERGE, and into ``upserted`` by the path the
    writer takes: unguarded where the bounds admit it, else the MERGE."""
    plan = plan_batch(TABLE, batch)
    apply_to_model(merged, plan)
    if bounds.admits(plan.changes):
        blind(upserted, plan)
    else:
        apply_to_model(upserted, plan)


@st.composite
def partitioned_batches(draw: st.DrawFn) -> tuple[Model, list[list[Change]]]:
    """A stored table, then a source history whose keys travel in fixed partitions, each
    partition delivered in order with Debezium-style replays, the partitions interleaved
    and cut into batches at random."""
    keys = draw(st.integers(1, 8))
    stored: Model = {(k,): (pos(0), {"id": k, "label": "stored"}) for k in range(keys) if k % 2}
    live = {k for (k,) in stored}
    queues: dict[int, list[tuple[Op, int, str]]] = {0: [], 1: [], 2: []}
    for seq in range(1, draw(st.integers(1, 60)) + 1):
        key = draw(st.integers(0, keys - 1))
        op = draw(st.sampled_from([Op.UPDATE, Op.DELETE])) if key in live else Op.CREATE
        (live.discard if op is Op.DELETE else live.add)(key)
        queues[key % 3].append((op, key, pos(seq)))
    for partition, queue in queues.items():
        for _ in range(draw(st.integers(0, 2))):
            if queue:
                end = draw(st.integers(1, len(queue)))
                start = draw(st.integers(0, end - 1))
                at = draw(st.integers(end, len(queue)))
                queue[at:at] = queue[start:end]
        queues[partition] = queue
    offsets = {p: 0 for p in queues}
    delivery: list[Change] = []
    while any(queues.values()):
        partition = draw(st.sampled_from([p for p, q in queues.items() if q]))
        op, key, position = queues[partition].pop(0)
        delivery.append(change(op, key, position, partition=partition, offset=offsets[partition]))
        offsets[partition] += 1
    cuts = sorted(draw(st.lists(st.integers(0, len(delivery)), max_size=8)))
    bounds = [0, *cuts, len(delivery)]
    return stored, [delivery[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@given(partitioned_batches())
@settings(max_examples=200)
def test_batches_the_bounds_admit_end_as_the_merge_would(
    data: tuple[Model, list[list[Change]]],
) -> None:
    # The UPSERT path skips the MERGE's guard: wherever the bounds admit a batch, the table
    # must come out the same as the guarded MERGE leaves it.
    stored, batches = data
    merged, upserted = dict(stored), dict(stored)
    bounds = PositionBounds(pos(0))
    for batch in batches:
        write_both_ways(merged, upserted, bounds, batch)
        bounds.record(batch)
        assert upserted == merged


def test_a_partitions_recorded_floor_stands_in_for_the_tables_highest_position() -> None:
    # Partition 0's rows are older than partition 1's: its floor admits changes that the
    # table's highest position (another partition's) would send to the MERGE.
    bounds = PositionBounds(None, floors={0: pos(5), 1: pos(90)}, count=2)
    assert bounds.admits([change(Op.UPDATE, 1, pos(6), partition=0)])
    assert not bounds.admits([change(Op.UPDATE, 1, pos(4), partition=0)])  # below its floor
    assert not bounds.admits([change(Op.UPDATE, 2, pos(50), partition=1)])
    assert not bounds.admits([change(Op.UPDATE, 3, pos(99), partition=2)])  # no floor, no base
    assert not PositionBounds(None).admits([])
    # What a commit records: each partition's floor raised by the changes it commits.
    committed = [change(Op.UPDATE, 1, pos(7), partition=0)]
    assert bounds.after(committed, [0, 1, 2]) == {0: pos(7), 1: pos(90)}
    bounds.record(committed)
    assert bounds.after([], [0]) == {0: pos(7)}
    with_base = PositionBounds(pos(30), floors={0: pos(5)})
    assert with_base.after([], [0, 1]) == {0: pos(5), 1: pos(30)}


@given(partitioned_batches(), st.data())
@settings(max_examples=200)
def test_partitions_handed_over_with_their_recorded_bounds_end_as_the_merge_would(
    data: tuple[Model, list[list[Change]]], choose: st.DataObject
) -> None:
    # One instance owns every partition, then hands some of them over at random points
    # (a restart, a rebalance). The new owner starts from the bounds the partitions' last
    # commits recorded, not the table's highest position: wherever those admit a batch,
    # the table must come out as the guarded MERGE leaves it.
    stored, batches = data
    merged, upserted = dict(stored), dict(stored)
    recorded: dict[int, str] = dict.fromkeys(range(3), pos(0))  # the stored rows' ceiling
    bounds = PositionBounds(None, floors=dict(recorded), count=3)
    for batch in batches:
        if choose.draw(st.booleans()):  # handed over: tracking starts from the record
            bounds = PositionBounds(None, floors=dict(recorded), count=3)
        write_both_ways(merged, upserted, bounds, batch)
        recorded.update(bounds.after(batch, range(3)))
        bounds.record(batch)
        assert upserted == merged


# -- partial rows (unchanged TOASTed values) ---------------------------------------------------

COLUMNS = ("a", "b", "c")


@st.composite
def partial_histories(
    draw: st.DrawFn,
) -> tuple[list[Change], dict[tuple[Any, ...], dict[str, Any]]]:
    """A source's history of keys 1-3 and the source's rows after it. An update either sends
    the whole row or leaves some columns unchanged (their values stay, and the change record
    carries stand-ins there and names them ``unchanged``), as Debezium does for unchanged
    TOASTed values under PostgreSQL's default replica identity. Each key's changes travel in
    one partition (``key % 2``), offsets in source order."""
    source: dict[tuple[Any, ...], dict[str, Any]] = {}
    changes: list[Change] = []
    offsets = [0, 0]
    for step in range(draw(st.integers(1, 14))):
        key = (draw(st.integers(1, 3)),)
        values = {c: draw(st.integers(0, 5)) for c in COLUMNS}
        unchanged: tuple[str, ...] | None = None
        if key not in source:
            op = draw(st.sampled_from([Op.CREATE, Op.READ]))
            row: dict[str, Any] | None = {"id": key[0], **values}
        elif draw(st.booleans()):
            op, row = Op.DELETE, None
        else:
            op = Op.UPDATE
            kept = draw(st.lists(st.sampled_from(COLUMNS), unique=True, max_size=3))
            unchanged = tuple(c for c in COLUMNS if c in kept) or None
            row = {"id": key[0], **values, **{c: "stand-in" for c in kept}}
        if op is Op.DELETE:
            del source[key]
        else:
            assert row is not None
            source[key] = {
                k: (source[key][k] if unchanged and k in unchanged else v) for k, v in row.items()
            }
        partition = key[0] % 2
        changes.append(
            Change(
                TABLE,
                op,
                pos(step + 1),
                0,
                key,
                row,
                TOPIC,
                partition,
                offsets[partition],
                1,
                unchanged,
            )
        )
        offsets[partition] += 1
    return changes, source


def _rows(model: Model) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {key: dict(row) for key, (_, row) in model.items()}


@given(partial_histories(), st.lists(st.integers(0, 14), max_size=4), st.integers(0, 14))
@settings(max_examples=200)
def test_partial_updates_keep_the_values_the_source_kept(
    history: tuple[list[Change], dict[tuple[Any, ...], dict[str, Any]]],
    cuts: list[int],
    replay_from: int,
) -> None:
    """Committed in batches cut anywhere, and then with a suffix delivered again (a replay
    after a crash), partial updates give the source's rows: an unchanged column holds what
    the source holds, never a stand-in."""
    changes, source = history
    model: Model = {}
    bounds = sorted({0, len(changes), *(min(c, len(changes)) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        apply_to_model(model, plan_batch(TABLE, changes[start:end]))
    assert _rows(model) == source
    apply_to_model(model, plan_batch(TABLE, changes[min(replay_from, len(changes)) :]))
    assert _rows(model) == source


def test_a_partial_update_takes_unchanged_values_from_an_earlier_change_of_the_batch() -> None:
    whole = Change(TABLE, Op.UPDATE, pos(2), 0, (1,), {"id": 1, "a": 7, "b": 8}, TOPIC, 0, 1, 1)
    partial = Change(
        TABLE, Op.UPDATE, pos(3), 0, (1,), {"id": 1, "a": "", "b": 9}, TOPIC, 0, 2, 1, ("a",)
    )
    plan = plan_batch(TABLE, [partial, whole])
    assert [(c.row, c.unchanged) for c in plan.upserts] == [({"id": 1, "a": 7, "b": 9}, None)]
    assert not plan.partial
    alone = plan_batch(TABLE, [partial])
    assert alone.partial and alone.upserts[0].unchanged == ("a",)


def test_a_replay_of_a_committed_change_gives_a_partial_update_none_of_its_values() -> None:
    """Stored: key 1 at position 5, ``a`` = 5. The batch: a connector's replay of position 3
    (``a`` = 3, committed long ago) and a partial update at 8 that left ``a`` unchanged. The
    stored ``a`` is the newer one, so the update must keep it (the MERGE reads it), not take
    the replay's. Without the committed bound the plan cannot tell the replay from a change
    of this batch."""
    replay = Change(TABLE, Op.UPDATE, pos(3), 0, (1,), {"id": 1, "a": 3, "b": 3}, TOPIC, 0, 7, 1)
    partial = Change(
        TABLE, Op.UPDATE, pos(8), 0, (1,), {"id": 1, "a": "", "b": 8}, TOPIC, 0, 8, 1, ("a",)
    )
    plan = plan_batch(TABLE, [replay, partial], committed={0: pos(5)})
    assert [(c.row, c.unchanged) for c in plan.upserts] == [({"id": 1, "a": "", "b": 8}, ("a",))]
    assert plan.partial
    unknown = plan_batch(TABLE, [replay, partial])
    assert [c.row for c in unknown.upserts] == [{"id": 1, "a": 3, "b": 8}]
    # A change of the batch above the bound still gives its values.
    fresh = replay._replace(position=pos(6))
    plan = plan_batch(TABLE, [fresh, partial], committed={0: pos(5)})
    assert [(c.row, c.unchanged) for c in plan.upserts] == [({"id": 1, "a": 3, "b": 8}, None)]


def test_the_committed_bound_of_a_partition_is_its_floor_or_its_raised_bound() -> None:
    bounds = PositionBounds(pos(9), floors={0: pos(4)}, partitions={0: pos(6), 1: pos(2)})
    assert bounds.committed() == {0: pos(6), 1: pos(2)}
    assert PositionBounds(pos(9), floors={0: pos(4)}).committed() == {0: pos(4)}
    assert PositionBounds(pos(9)).committed() == {}  # the base bounds no single partition


@pytest.mark.parametrize("empty", [True, False])
def test_a_partial_batch_always_takes_the_merge(empty: bool) -> None:
    partial = Change(
        TABLE, Op.UPDATE, pos(3), 0, (1,), {"id": 1, "a": "", "b": 9}, TOPIC, 0, 2, 1, ("a",)
    )
    plan = plan_batch(TABLE, [partial])
    assert plan.path(table_is_empty=empty, stored_floor=None, newer=True) is Path.MERGE


def test_a_replayed_truncate_does_not_empty_the_table_again() -> None:
    """A connector's replay delivers the committed truncate again with later changes: the
    batch writes those changes and keeps every row committed since the truncate."""
    replayed = change(Op.TRUNCATE, None, pos(3), partition=1, offset=40)
    later = change(Op.CREATE, 2, pos(9), partition=0, offset=41)
    plan = plan_batch(TABLE, [replayed, later], truncated_at=pos(3))
    assert not plan.truncated and plan.truncate_position is None
    assert plan.path(table_is_empty=False) is not Path.REPLACE
    model: Model = {(1,): (pos(5), {"label": "committed after the truncate"})}
    apply_to_model(model, plan)
    assert set(model) == {(1,), (2,)}
    # A new truncate still empties it.
    newer = change(Op.TRUNCATE, None, pos(7), partition=1, offset=42)
    assert plan_batch(TABLE, [replayed, newer, later], truncated_at=pos(3)).truncated
