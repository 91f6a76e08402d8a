"""The workload plan: deterministic, valid against its own model, with every kind of change."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefjord.demo.model import ADDED_COLUMNS, INITIAL_TABLES, SHIPMENTS, WIDENED_COLUMN, Kind
from icefjord.demo.plan import (
    AddColumn,
    ChangeKey,
    CreateTable,
    Delete,
    Insert,
    Planner,
    SourceModel,
    Transaction,
    Update,
    UpdateMany,
    WidenColumn,
    WorkloadSpec,
    row_operations,
)

pytestmark = pytest.mark.unit


def whole_plan(spec: WorkloadSpec) -> tuple[Planner, list[Transaction], list[Transaction]]:
    planner = Planner(spec)
    seed = list(planner.seed())
    return planner, seed, list(planner.changes())


def test_same_seed_same_plan_other_seed_other_plan() -> None:
    spec = WorkloadSpec(rate=50, duration_s=4, initial_rows=5, seed=3)
    assert whole_plan(spec)[2] == whole_plan(spec)[2]
    assert (
        whole_plan(spec)[2]
        != whole_plan(WorkloadSpec(rate=50, duration_s=4, initial_rows=5, seed=4))[2]
    )


def test_seed_loads_initial_rows_into_each_initial_table() -> None:
    _, seed, _ = whole_plan(WorkloadSpec(rate=10, duration_s=1, initial_rows=250))
    inserted = Counter(op.table for tx in seed for op in tx.ops if isinstance(op, Insert))
    assert inserted == {t.name: 250 for t in INITIAL_TABLES}
    assert all(tx.at_s == 0 and len(tx.ops) <= 100 for tx in seed)


def test_changes_follow_the_rate_and_include_every_kind_of_change() -> None:
    spec = WorkloadSpec(rate=200, duration_s=30, initial_rows=50)
    _, _, changes = whole_plan(spec)
    dml = [op for tx in changes if not tx.is_ddl for op in tx.ops]
    # ops per transaction are uniform in [1, 2 * ops_per_tx - 1]: the mean is ops_per_tx.
    assert 0.9 * spec.rate * spec.duration_s < len(dml) < 1.1 * spec.rate * spec.duration_s
    kinds = Counter(type(op).__name__ for op in dml)
    assert set(kinds) == {"Insert", "Update", "ChangeKey", "Delete"}
    tables = Counter(op.table for op in dml)
    assert set(tables) == {"customers", "orders", "payments", "shipments"}
    starts = [tx.at_s for tx in changes]
    assert starts == sorted(starts) and starts[-1] < spec.duration_s


def test_schema_changes_happen_once_at_their_fraction_of_the_run() -> None:
    spec = WorkloadSpec(
        rate=100, duration_s=20, create_table_at=0.2, add_columns_at=0.5, widen_at=0.7
    )
    _, _, changes = whole_plan(spec)
    ddl = [(tx.at_s, op) for tx in changes for op in tx.ops if tx.is_ddl]
    assert [op for _, op in ddl] == [
        CreateTable(SHIPMENTS),
        *(AddColumn(t, c) for t, c in ADDED_COLUMNS),
        WidenColumn(*WIDENED_COLUMN),
    ]
    created, added, widened = ddl[0][0], ddl[1][0], ddl[-1][0]
    assert created == pytest.approx(0.2 * spec.duration_s, abs=0.1)
    assert added == pytest.approx(0.5 * spec.duration_s, abs=0.1)
    assert widened == pytest.approx(0.7 * spec.duration_s, abs=0.1)
    # No DML touches shipments before it exists; the widened column gets bigint values after.
    table, column, _ = WIDENED_COLUMN
    for tx in changes:
        for op in tx.ops:
            if isinstance(op, Insert | Update | Delete | ChangeKey) and tx.at_s < created:
                assert op.table != "shipments"
            values = (
                op.row if isinstance(op, Insert) else op.values if isinstance(op, Update) else {}
            )
            if getattr(op, "table", None) == table and column in values:
                assert (values[column] >= 2**31) == (tx.at_s >= widened)


@settings(max_examples=15)
@given(st.integers(0, 2**32), st.floats(20, 300))
def test_replaying_the_plan_reproduces_the_model(seed: int, rate: float) -> None:
    """Every update and delete hits a live row (apply would raise), and the planner's model is
    exactly what applying the operations gives."""
    planner, seed_txs, changes = whole_plan(
        WorkloadSpec(rate=rate, duration_s=3, initial_rows=10, seed=seed)
    )
    replay = SourceModel()
    for table in INITIAL_TABLES:
        replay.apply(CreateTable(table))
    for tx in [*seed_txs, *changes]:
        for op in tx.ops:
            replay.apply(op)
    assert replay == planner.model


def test_key_changes_only_on_bigint_id_tables_and_keys_stay_unique() -> None:
    planner, _, changes = whole_plan(WorkloadSpec(rate=300, duration_s=20, initial_rows=30))
    moved = {op.table for tx in changes for op in tx.ops if isinstance(op, ChangeKey)}
    assert moved and moved <= {"customers", "shipments"}
    for name, rows in planner.model.rows.items():
        key = planner.model.tables[name].key
        assert all(tuple(row[k] for k in key) == pk for pk, row in rows.items())


def test_model_rows_get_the_added_columns() -> None:
    planner, _, _ = whole_plan(WorkloadSpec(rate=100, duration_s=10, initial_rows=20))
    customers = planner.model.tables["customers"]
    assert [c.name for c in customers.columns][-2:] == [c.name for _, c in ADDED_COLUMNS]
    assert all("loyalty_points" in row for row in planner.model.rows["customers"].values())
    assert planner.model.tables["orders"].column("quantity").kind == Kind.BIGINT


def test_values_fit_their_postgres_types() -> None:
    planner, _, _ = whole_plan(WorkloadSpec(rate=200, duration_s=10, initial_rows=100))
    for name, table in planner.model.tables.items():
        for row in planner.model.rows[name].values():
            for column in table.columns:
                value = row[column.name]
                if value is None:
                    assert column.nullable or column.name in {c.name for _, c in ADDED_COLUMNS}
                elif column.kind == Kind.NUMERIC:
                    assert isinstance(value, Decimal)
                    assert value.as_tuple().exponent == -(column.scale or 0)
                    assert len(value.as_tuple().digits) <= (column.precision or 0)
                elif column.kind == Kind.SMALLINT:
                    assert -32768 <= value <= 32767
                elif column.kind == Kind.TIMESTAMP and column.precision == 3:
                    assert value.microsecond % 1000 == 0
                elif column.kind == Kind.TEXT:
                    assert "\x00" not in value


@pytest.mark.parametrize(
    "bad",
    [{"rate": 0}, {"duration_s": -1}, {"ops_per_tx": 0}, {"widen_at": 1.0}],
)
def test_invalid_specs_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        WorkloadSpec(**bad)  # type: ignore[arg-type]


def test_model_refuses_impossible_operations() -> None:
    model = SourceModel()
    model.apply(CreateTable(SHIPMENTS))
    with pytest.raises(KeyError):
        model.apply(Delete("shipments", (1,)))
    row = {"id": 1, "order_id": "x", "carrier": "DHL"}
    changes = model.apply(Insert("shipments", row))
    assert [(c.op, c.before, c.after is not None) for c in changes] == [("c", None, True)]
    with pytest.raises(ValueError):
        model.apply(Insert("shipments", row))
    moved = model.apply(ChangeKey("shipments", (1,), (2,)))
    assert [c.op for c in moved] == ["d", "c"]
    assert moved[1].after is not None and moved[1].after["id"] == 2
    assert list(model.rows["shipments"]) == [(2,)]


def test_set_based_steady_stream_updates_distinct_live_rows_at_the_offered_rate() -> None:
    planner = Planner(WorkloadSpec(initial_rows=300, seed=11, ops_per_tx=3))
    seed_txs = list(planner.seed())
    replay = SourceModel()
    for table in INITIAL_TABLES:
        replay.apply(CreateTable(table))
    for tx in seed_txs:
        for op in tx.ops:
            replay.apply(op)
    plan = list(planner.steady(10_000.0, 2.0, rows_per_statement=50))
    ops = [op for tx in plan for op in tx.ops]
    assert ops and all(isinstance(op, UpdateMany) for op in ops)
    for op in ops:
        assert isinstance(op, UpdateMany)
        assert 1 <= len(op.keys) <= 50 and len(set(op.keys)) == len(op.keys)
        key_columns = set(planner.model.tables[op.table].key)
        assert op.values and not key_columns & set(op.values)
    # Paced by rows: each transaction is due when the rows planned before it are, so the
    # stream offers 10,000 rows/s over its 2 s, whatever its random transaction sizes.
    due = 0
    for tx in plan:
        assert tx.at_s == pytest.approx(due / 10_000.0)
        due += sum(row_operations(op) for op in tx.ops)
    assert 20_000 <= due < 20_000 + 5 * 50
    assert {op.table for op in ops} == {t.name for t in INITIAL_TABLES}
    # Every key was live (apply raises otherwise) and the planner's model is the replay's.
    changes = [change for op in ops for change in replay.apply(op)]
    assert replay == planner.model
    assert len(changes) == sum(row_operations(op) for op in ops)
    assert all(change.op == "u" for change in changes)


def test_row_operations_counts_rows_not_statements() -> None:
    assert row_operations(UpdateMany("customers", ((1,), (2,), (3,)), {"name": "x"})) == 3
    assert row_operations(Update("customers", (1,), {"name": "x"})) == 1
    assert row_operations(ChangeKey("customers", (1,), (9,))) == 1
    assert row_operations(CreateTable(SHIPMENTS)) == 0
