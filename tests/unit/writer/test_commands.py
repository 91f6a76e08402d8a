"""Operators' PAUSE, RESUME and FLUSH as the writer keeps them: the state rebuilt from a
replay of the control topic, "*" against a table's own command, a pause before the table
appears, a FLUSH that is never run again, and the answers."""

from __future__ import annotations

from typing import Any

import pytest
from commands_support import Published, command_event, operator_commands
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from services.iceberg_writer.batching import BatchClock
from services.iceberg_writer.changes import Change, Op
from services.iceberg_writer.commands import OperatorCommands, Pauses, check_command_table
from services.iceberg_writer.control_view import ControlView
from services.iceberg_writer.metrics import WriterMetrics
from services.iceberg_writer.state import TableState
from shared.events import (
    ControlEvent,
    OperatorCommand,
    OperatorCommandKind,
    OperatorCommandStatus,
)

pytestmark = pytest.mark.unit

PAUSE, RESUME, FLUSH = (
    OperatorCommandKind.PAUSE,
    OperatorCommandKind.RESUME,
    OperatorCommandKind.FLUSH,
)
APPLIED, NOT_LOADED = OperatorCommandStatus.APPLIED, OperatorCommandStatus.NOT_LOADED
ORDERS, ITEMS = "shop.orders", "shop.items"


def state(name: str, pending: int = 0, partition: int = 0) -> TableState:
    table = TableState(name=name, topic=f"icefjord.changes.{name}", clock=BatchClock(60, 1, 100))
    for offset in range(pending):
        table.pending.append(
            Change(
                name,
                Op.CREATE,
                f"{offset:020d}",
                0,
                (offset,),
                {"id": offset},
                table.topic,
                partition,
                offset,
                1,
            )
        )
    return table


class Writer:
    """A control view over real OperatorCommands, with the partitions' pauses recorded."""

    def __init__(self, *names: str, covers: str = "") -> None:
        self.metrics = WriterMetrics.create(CollectorRegistry())
        self.tables: dict[str, TableState] = {name: state(name) for name in names}
        self.commands, self.published = operator_commands(self.tables, covers, self.metrics)
        self.view = ControlView(
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            "control",
            self.tables,
            self.metrics,
            self.commands,
        )
        self.view.listener = self  # type: ignore[assignment]
        self.applied: list[str] = []

    def pause_changed(self, table: TableState) -> None:
        self.applied.append(table.name)

    def replay(self, *events: ControlEvent) -> None:
        for event in events:
            self.view.handle(event, replay=True)
        self.commands.count_paused()  # as the end of ControlView.replay does

    def say(self, *events: ControlEvent) -> None:
        for event in events:
            self.view.handle(event)

    def load(self, name: str, pending: int = 0) -> TableState:
        self.tables[name] = state(name, pending)
        self.commands.loaded(self.tables[name])
        return self.tables[name]

    def paused(self, name: str) -> bool:
        return self.view.is_paused(self.tables.get(name) or state(name))

    def gauge(self) -> float:
        (metric,) = self.metrics.paused_tables.collect()
        return float(metric.samples[0].value)


# -- the pause state ------------------------------------------------------------------------


def test_a_replay_rebuilds_each_tables_latest_pause_or_resume() -> None:
    writer = Writer()
    writer.replay(
        command_event(PAUSE, ORDERS, 1),
        command_event(PAUSE, ITEMS, 2),
        command_event(RESUME, ORDERS, 3),
        command_event(PAUSE, ORDERS, 4),
        command_event(RESUME, ITEMS, 5),
    )
    assert writer.paused(ORDERS) and not writer.paused(ITEMS)
    assert writer.published.events == [], "a replayed command is not answered again"


def test_within_one_key_the_log_order_wins_over_the_publishers_clocks() -> None:
    writer = Writer()
    writer.replay(command_event(PAUSE, ORDERS, at_ms=9_000), command_event(RESUME, ORDERS, 1_000))
    assert not writer.paused(ORDERS)


@pytest.mark.parametrize(
    ("events", "orders", "items"),
    [
        ([(PAUSE, "*", 1)], True, True),
        ([(PAUSE, "*", 1), (RESUME, ORDERS, 2)], False, True),
        ([(PAUSE, ORDERS, 1), (RESUME, "*", 2)], False, False),
        ([(RESUME, ORDERS, 2), (PAUSE, "*", 1)], False, True),  # read in another order
        ([(PAUSE, "*", 2), (RESUME, ORDERS, 1)], True, True),
        ([(PAUSE, ITEMS, 1), (PAUSE, "*", 2), (RESUME, "*", 3)], False, False),
        ([(PAUSE, "*", 5), (RESUME, ORDERS, 5)], False, True),  # a tie: the table's own
    ],
)
def test_between_a_tables_own_command_and_one_for_every_table_the_later_wins(
    events: list[tuple[OperatorCommandKind, str, int]], orders: bool, items: bool
) -> None:
    writer = Writer()
    writer.replay(*(command_event(kind, table, at) for kind, table, at in events))
    assert (writer.paused(ORDERS), writer.paused(ITEMS)) == (orders, items)


commands = st.lists(
    st.tuples(st.sampled_from([PAUSE, RESUME, FLUSH]), st.sampled_from([ORDERS, ITEMS, "*"])),
    max_size=12,
)


@given(commands, st.randoms(use_true_random=False))
def test_any_interleaving_of_the_keys_gives_the_state_of_the_latest_commands(
    said: list[tuple[OperatorCommandKind, str]], rng: Any
) -> None:
    """The replay reads the control topic's partitions interleaved as they come: only each
    key's own order is kept. Whatever the interleaving, each table is as the latest
    PAUSE or RESUME naming it or "*" left it."""
    events = [command_event(kind, table, at_ms=i) for i, (kind, table) in enumerate(said)]
    queues = {key: [e for e in events if e.table == key] for key in (ORDERS, ITEMS, "*")}
    interleaved: list[ControlEvent] = []
    while any(queues.values()):
        key = rng.choice([k for k, queue in queues.items() if queue])
        interleaved.append(queues[key].pop(0))
    pauses = Pauses()
    for event in interleaved:
        assert isinstance(event.payload, OperatorCommand)
        pauses.record(event.payload, event.produced_at_ms)
    for table in (ORDERS, ITEMS):
        latest = [k for k, t in said if t in (table, "*") and k is not FLUSH]
        assert pauses.is_paused(table) == (bool(latest) and latest[-1] is PAUSE)


# -- tables that appear later ---------------------------------------------------------------


def test_a_pause_of_a_table_not_loaded_yet_is_kept_and_answered_so() -> None:
    writer = Writer(ITEMS)
    pause = command_event(PAUSE, ORDERS)
    writer.say(pause)
    (answer,) = writer.published.results
    assert (answer.command_event_id, answer.status, answer.tables) == (
        pause.event_id,
        NOT_LOADED,
        (),
    )
    assert writer.gauge() == 0, "no table loaded is paused"
    writer.load(ORDERS)
    assert writer.paused(ORDERS) and not writer.paused(ITEMS)
    assert writer.gauge() == 1


def test_a_replayed_pause_holds_a_table_that_appears_after_the_restart() -> None:
    writer = Writer()
    writer.replay(command_event(PAUSE, "*", 1), command_event(RESUME, ITEMS, 2))
    assert writer.gauge() == 0
    writer.load(ORDERS)
    writer.load(ITEMS)
    assert writer.paused(ORDERS) and not writer.paused(ITEMS)
    assert writer.gauge() == 1


def test_a_pause_for_every_table_applies_to_the_loaded_ones_and_those_that_come() -> None:
    writer = Writer(ORDERS, ITEMS)
    writer.say(command_event(PAUSE, "*"))
    assert sorted(writer.applied) == [ITEMS, ORDERS]
    (answer,) = writer.published.results
    assert (answer.status, answer.tables) == (APPLIED, (ITEMS, ORDERS))
    assert writer.gauge() == 2
    writer.load("shop.later")
    assert writer.paused("shop.later") and writer.gauge() == 3
    writer.say(command_event(RESUME, ORDERS, at_ms=2_000))
    assert not writer.paused(ORDERS) and writer.gauge() == 2
    assert writer.published.results[-1].tables == (ORDERS,)


def test_a_resume_published_before_a_pause_of_every_table_is_answered_as_failed() -> None:
    writer = Writer(ORDERS)
    writer.say(command_event(PAUSE, "*", at_ms=5_000), command_event(RESUME, ORDERS, at_ms=4_000))
    answer = writer.published.results[-1]
    assert answer.status is OperatorCommandStatus.FAILED and writer.paused(ORDERS)
    assert answer.message is not None and "'*'" in answer.message


def test_commands_for_another_writers_tables_are_neither_kept_nor_answered() -> None:
    writer = Writer(covers="shop.")
    writer.say(command_event(PAUSE, "crm.accounts"))
    writer.replay(command_event(PAUSE, "crm.contacts"))
    assert writer.published.events == []
    assert not writer.paused("crm.accounts") and not writer.paused("crm.contacts")
    writer.say(command_event(PAUSE, "*"))
    assert writer.published.results[-1].status is APPLIED


def test_an_answer_kafka_does_not_take_leaves_the_pause_in_effect() -> None:
    writer = Writer(ORDERS)
    writer.published.down = True
    writer.say(command_event(PAUSE, ORDERS))
    assert writer.paused(ORDERS) and writer.applied == [ORDERS]


# -- flush ----------------------------------------------------------------------------------


def test_a_replayed_flush_is_not_run_again() -> None:
    writer = Writer()
    writer.replay(command_event(FLUSH, ORDERS, 1), command_event(FLUSH, "*", 2))
    table = writer.load(ORDERS, pending=3)
    assert not table.flush and writer.commands.flushes == []
    assert writer.published.events == [] and not writer.paused(ORDERS)


def test_a_flush_waits_for_the_changes_held_when_it_came_then_is_answered_once() -> None:
    writer = Writer()
    orders = writer.load(ORDERS, pending=3)
    items = writer.load(ITEMS)
    flush = command_event(FLUSH, "*")
    writer.say(flush)
    assert orders.flush and not items.flush
    writer.commands.flushed()
    assert writer.published.results == [], "answered before the commit"
    orders.committed = {(orders.topic, 0): 2}  # a commit that stopped short of the third
    writer.commands.flushed()
    assert writer.published.results == []
    orders.committed = {(orders.topic, 0): 3}
    orders.pending = []
    writer.commands.flushed()
    writer.commands.flushed()
    (answer,) = writer.published.results
    assert (answer.command_event_id, answer.status, answer.records, answer.tables) == (
        flush.event_id,
        APPLIED,
        3,
        (ITEMS, ORDERS),
    )
    assert not orders.flush


def test_a_flush_with_nothing_held_or_no_table_is_answered_at_once() -> None:
    writer = Writer(ORDERS)
    writer.say(command_event(FLUSH, ORDERS), command_event(FLUSH, ITEMS))
    held, missing = writer.published.results
    assert (held.status, held.records) == (APPLIED, 0)
    assert (missing.status, missing.records) == (NOT_LOADED, 0)


def test_a_flush_forgets_partitions_taken_by_another_writer() -> None:
    writer = Writer()
    orders = writer.load(ORDERS, pending=2)
    writer.say(command_event(FLUSH, ORDERS))
    writer.commands.revoked([(orders.topic, 0)])
    writer.commands.flushed()
    assert writer.published.results[-1].status is APPLIED


# -- the names an operator may give ---------------------------------------------------------


@pytest.mark.parametrize("name", ["*", "shop.orders", "shop-eu.order_items", "s1.2024_q1"])
def test_a_command_may_name_every_table_the_writer_can_have(name: str) -> None:
    assert check_command_table(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "no table"),
        ("orders", "not <namespace>.<table>"),
        ("a.b.c", "not <namespace>.<table>"),
        ("shop.*", "not <namespace>.<table>"),
        ("shop.or ders", "not <namespace>.<table>"),
        ("shop." + "x" * 240, "longer than"),
    ],
)
def test_a_name_no_table_can_have_is_refused_with_the_reason(name: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_command_table(name)


def test_operator_commands_publish_through_the_shared_publisher_protocol() -> None:
    published = Published()
    commands = OperatorCommands(
        {},
        published,
        producer="iceberg-writer/h1",
        covers=lambda table: True,
        metrics=WriterMetrics.create(CollectorRegistry()),
    )
    pause = command_event(PAUSE, ORDERS)
    assert isinstance(pause.payload, OperatorCommand)
    commands.received(pause, pause.payload, lambda table: None)
    (event,) = published.events
    assert (event.table, event.producer) == (ORDERS, "iceberg-writer/h1")
