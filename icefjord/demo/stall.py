"""Where does the pipeline hold the changes Iceberg is missing? Asked when the demo stops
waiting for Iceberg to catch up.

The services' lag metrics are set after each batch, so a consumer that stopped reading (no
assignment, stuck in a rebalance) keeps reporting its last lag, often 0. This report asks
the broker and the catalog instead, stage by stage:

- Debezium: the connector's and its tasks' states (Kafka Connect's REST API);
- cdc-normalizer: its consumer group's state and members, and per Debezium topic how many
  offsets lie past the group's committed ones;
- iceberg-writer: its consumer group's state and members (it commits no offsets to Kafka),
  and per table how many offsets of its changes topic lie past the table's checkpoint (the
  offsets in its newest writer commit).

Offsets include transaction markers and the records of aborted transactions (a reader skips
them, and a table's checkpoint moves past them only with its next commit), so a count is an
upper bound on the records still to come.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from services.cdc_normalizer.metrics import lag_by_topic
from shared.kafka import last_stable_offsets, make_admin
from shared.settings import KafkaSettings

TP = tuple[str, int]


def unread(ends: Mapping[TP, int], positions: Mapping[TP, int]) -> dict[str, int]:
    """Per topic, the offsets between each partition's position (none: its start) and its
    end (the normalizer's own ``lag_by_topic``); topics with nothing unread are left out."""
    rows = ((t, max(0, positions.get((t, p), 0)), end) for (t, p), end in ends.items())
    return {topic: n for topic, n in lag_by_topic(rows).items() if n}


def describe_unread(counts: Mapping[str, int], what: str) -> str:
    if not counts:
        return f"nothing {what}"
    parts = [f"{topic} {n:,}" for topic, n in sorted(counts.items())]
    return f"{what}: " + ", ".join(parts)


def describe_connector(name: str, status: Mapping[str, Any]) -> str:
    """``connector <name>: RUNNING; task 0 RUNNING`` with the first line of a failure's
    trace."""
    connector = status.get("connector", {})
    parts = [f"connector {name}: {connector.get('state', '?')}"]
    for task in status.get("tasks", []):
        text = f"task {task.get('id', '?')} {task.get('state', '?')}"
        trace = str(task.get("trace") or "").strip().splitlines()
        if trace:
            text += f" ({trace[0][:200]})"
        parts.append(text)
    return "; ".join(parts)


def stall_report(
    kafka: KafkaSettings,
    catalog: Any,
    *,
    source_pattern: str,
    normalizer_group: str,
    writer_group: str,
    tables: Mapping[str, str],
) -> list[str]:
    """One line per stage. ``source_pattern``: the normalizer's subscription; ``tables``:
    each Iceberg table (``namespace.name``) with its changes topic. Never raises: a stage
    that cannot be asked says why."""
    admin = make_admin(kafka)
    try:
        topics = admin.list_topics(timeout=10).topics
    except Exception as exc:
        return [f"broker not answering: {exc}"]
    pattern = re.compile(source_pattern)
    source = [t for t in topics if pattern.match(t)]
    changes = [t for t in tables.values() if t in topics]
    return [
        _stage(
            admin,
            topics,
            ("normalizer", normalizer_group, "unread"),
            source,
            lambda: _group_offsets(admin, normalizer_group),
        ),
        _stage(
            admin,
            topics,
            ("writer", writer_group, "past the tables' checkpoints"),
            changes,
            lambda: _checkpoints(catalog, tables),
        ),
    ]


def _stage(
    admin: Any,
    topics: Mapping[str, Any],
    names: tuple[str, str, str],
    read: list[str],
    positions: Callable[[], Mapping[TP, int]],
) -> str:
    """``<service> (group <id> <state>, <n> members): <what>: <topic> <offsets>, ...`` for
    the topics ``read`` from ``positions``; what went wrong when it cannot be asked."""
    service, group, what = names
    try:
        ends = last_stable_offsets(admin, _partitions(topics, read))
        counts = unread(ends, positions())
    except Exception as exc:
        return f"{service}: could not be asked: {exc}"
    return f"{service} ({_group_state(admin, group)}): " + describe_unread(counts, what)


def _partitions(topics: Mapping[str, Any], names: Iterable[str]) -> list[Any]:
    from confluent_kafka import TopicPartition

    return [TopicPartition(name, p) for name in names for p in topics[name].partitions]


def _group_offsets(admin: Any, group: str) -> dict[TP, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = futures[group].result()
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or []}


def _group_state(admin: Any, group: str) -> str:
    try:
        description = admin.describe_consumer_groups([group])[group].result()
    except Exception as exc:
        return f"group {group}: not described: {exc}"
    members = len(description.members)
    state = getattr(description.state, "name", str(description.state))
    return f"group {group} {state}, {members} member{'' if members == 1 else 's'}"


def _checkpoints(catalog: Any, tables: Mapping[str, str]) -> dict[TP, int]:
    """The offsets of each table's checkpoint, for its changes topic."""
    from services.iceberg_writer.tables import checkpoint_of

    out: dict[TP, int] = {}
    for table, topic in tables.items():
        try:
            checkpoint = checkpoint_of(catalog.load_table(table))
        except Exception:  # no table yet: everything of its topic is unread
            continue
        if checkpoint is not None:
            out.update({tp: n for tp, n in checkpoint.offsets.items() if tp[0] == topic})
    return out
