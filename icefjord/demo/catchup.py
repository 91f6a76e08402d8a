"""Has the writer caught up with the source, and did valid data make dead letters?

Caught up means: for every table, the writer's watermark (``icefjord.watermark-ms`` in the
snapshot summaries of its commits: the largest source commit time applied) has reached the
commit time of the table's last source change, and neither the normalizer nor the writer
has consumer lag. Dead letters are counted on the dead-letter topic itself, read committed
from the offsets it had before the run, so service restarts (which reset metrics) do not
hide any.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from shared.kafka import read_committed
from shared.settings import KafkaSettings

WATERMARK = "icefjord.watermark-ms"
SOURCE_TOPIC_HEADER = "icefjord.source.topic"


def behind(targets: Mapping[str, int], watermarks: Mapping[str, int | None]) -> dict[str, int]:
    """Tables whose watermark has not reached their target, with how far behind (ms; the
    whole target when the table has no watermark yet)."""
    out: dict[str, int] = {}
    for table, target in targets.items():
        mark = watermarks.get(table)
        if mark is None:
            out[table] = target
        elif mark < target:
            out[table] = target - mark
    return out


def caught_up(
    targets: Mapping[str, int],
    watermarks: Mapping[str, int | None],
    normalizer_lag: float | None,
    writer_lag: float | None,
) -> bool:
    """All watermarks reached and no known lag (an absent lag metric does not block)."""
    lags = [lag for lag in (normalizer_lag, writer_lag) if lag is not None]
    return not behind(targets, watermarks) and all(lag <= 0 for lag in lags)


def watermark_of(snapshots: Iterable[Any]) -> int | None:
    """The largest ``icefjord.watermark-ms`` among pyiceberg snapshots (maintenance commits
    carry none)."""
    marks = []
    for snapshot in snapshots:
        summary = snapshot.summary
        value = None if summary is None else summary.additional_properties.get(WATERMARK)
        if value is not None:
            marks.append(int(value))
    return max(marks) if marks else None


def iceberg_watermarks(catalog: Any, tables: Iterable[str]) -> dict[str, int | None]:
    """Each ``<namespace>.<table>``'s writer watermark (None: no table or no commit yet)."""
    out: dict[str, int | None] = {}
    for table in tables:
        try:
            loaded = catalog.load_table(table)
        except Exception:  # NoSuchTableError, or the catalog busy: not there yet
            out[table] = None
            continue
        out[table] = watermark_of(loaded.metadata.snapshots)
    return out


def end_offsets(kafka: KafkaSettings, topic: str) -> dict[int, int]:
    """High watermark of each partition of ``topic`` ({} when it does not exist)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kafka.client_config() | {"group.id": f"icefjord-demo-{uuid.uuid4()}"})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            return {}
        out = {}
        for partition in info.partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
            out[partition] = int(high)
        return out
    finally:
        consumer.close()


def count_committed(
    kafka: KafkaSettings,
    topic: str,
    since: Mapping[int, int],
    *,
    source_prefix: str = "",
    timeout_s: float = 30.0,
) -> int:
    """Committed records of ``topic`` after offsets ``since`` (missing partitions: from 0)
    whose ``icefjord.source.topic`` header starts with ``source_prefix`` (dead letters of
    other pipelines on a shared topic are not ours)."""
    ends = end_offsets(kafka, topic)
    if not ends or all(ends[p] <= since.get(p, 0) for p in ends):
        return 0
    count = 0
    for message in read_committed(kafka, topic, since, timeout_s):
        headers = dict(message.headers() or [])
        origin = headers.get(SOURCE_TOPIC_HEADER, b"").decode(errors="replace")
        if origin.startswith(source_prefix):
            count += 1
    return count
