"""Checkpoints of the control topic on the real Kafka and registry: a running writer's control
view saves them as events arrive, a restarted one starts from the newest, and one that does
not fit the topic any more is ignored."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from harness import Stack
from prometheus_client import CollectorRegistry

from icefjord.bench.control_history import publish_history, state_topic
from services.iceberg_writer.commands import OperatorCommands
from services.iceberg_writer.control_view import FOLD, ControlView
from services.iceberg_writer.metrics import WriterMetrics
from shared.avro import AvroCodec
from shared.control import ControlPublisher, ControlReader
from shared.control_state import Checkpoint, Checkpoints, StateStore
from shared.kafka import make_admin, make_consumer, make_producer
from shared.registry import make_registry_client

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(stack: Stack) -> str:
    name = f"control-state-{uuid.uuid4().hex[:8]}"
    publish_history(stack.kafka, stack.registry, name, 100, lambda n: None)
    return name


def store_of(stack: Stack, topic: str) -> StateStore:
    codec = AvroCodec(make_registry_client(stack.registry))
    return StateStore(
        stack.kafka,
        codec,
        control_topic=topic,
        fold=FOLD,
        producer="test",
        state_topic=state_topic(topic),
    )


@pytest.fixture
def views(stack: Stack, topic: str) -> Iterator[list[ControlView]]:
    made: list[ControlView] = []
    yield made
    for view in made:
        view.close()


def new_view(stack: Stack, topic: str, made: list[ControlView], every: int = 50) -> ControlView:
    codec = AvroCodec(make_registry_client(stack.registry))
    consumer = make_consumer(stack.kafka, f"test-{uuid.uuid4().hex[:8]}")
    metrics = WriterMetrics.create(CollectorRegistry())
    commands = OperatorCommands(
        {},
        ControlPublisher(make_producer(stack.kafka), codec, topic),
        producer="test",
        covers=lambda table: True,
        metrics=metrics,
    )
    view = ControlView(
        consumer,
        ControlReader(consumer, codec, topic),
        make_admin(stack.kafka),
        topic,
        {},
        metrics,
        commands,
        Checkpoints(store_of(stack, topic), every=every, interval_s=3600),
    )
    made.append(view)
    return view


def test_a_running_view_saves_checkpoints_and_a_restart_reads_only_what_came_after(
    stack: Stack, topic: str, views: list[ControlView]
) -> None:
    running = new_view(stack, topic, views)
    running.replay(timeout_s=60)
    assert running.last_replay is not None
    assert (running.last_replay.from_checkpoint, running.last_replay.from_topic) == (0, 100)
    saved = store_of(stack, topic).load()
    assert saved is not None and sum(saved.offsets.values()) == 100

    publish_history(stack.kafka, stack.registry, topic, 120, lambda n: None, first=100)
    running.read_to_end()  # 120 events: one checkpoint after 50 or more of them
    checkpoint = store_of(stack, topic).load()
    assert checkpoint is not None and sum(checkpoint.offsets.values()) >= 150

    restarted = new_view(stack, topic, views)
    restarted.replay(timeout_s=60)
    # Assigned at the ends the checkpoint and the events after it gave, with nothing more to
    # read, it knows it is at the end (a table's first commit waits for that).
    restarted.read_to_end(timeout_s=10)
    replay = restarted.last_replay
    assert replay is not None
    assert replay.from_topic == 220 - sum(checkpoint.offsets.values())
    assert replay.from_checkpoint == len(checkpoint.events)
    # The same state as the running view's, which folded every event.
    assert restarted.announced == running.announced
    kept = [(o.partition, o.offset) for o in running.retained.events()]
    assert sorted((o.partition, o.offset) for o in restarted.retained.events()) == sorted(kept)
    assert len(kept) == 61  # the 60 schema plans and the busy table's newest CommitDone


def test_a_checkpoint_ahead_of_the_topic_is_ignored_and_replaced(
    stack: Stack, topic: str, views: list[ControlView]
) -> None:
    store_of(stack, topic).save(Checkpoint({p: 10_000 for p in range(6)}, []))
    view = new_view(stack, topic, views)
    view.replay(timeout_s=60)
    assert view.last_replay is not None and view.last_replay.from_topic == 100
    assert len(view.announced) == 20  # the history's 20 tables with schema plans
    replaced = store_of(stack, topic).load()
    assert replaced is not None and sum(replaced.offsets.values()) == 100
