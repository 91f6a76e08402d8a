"""Topic requests built from the contracts' topic catalog, so every service creates a topic
with the partitions, cleanup policy and retention the catalog declares."""

from __future__ import annotations

import contracts
from shared.kafka import TopicRequest


def catalog_topic_request(
    name: str,
    catalog_name: str,
    *,
    partitions: int | None = None,
    replication_factor: int | None = None,
) -> TopicRequest:
    """A request for topic ``name`` with the settings of catalog entry ``catalog_name``.

    ``partitions`` and ``replication_factor`` override the catalog's; ``min.insync.replicas``
    never exceeds the replication factor. Raises StopIteration for an unknown catalog entry.
    """
    spec = next(t for t in contracts.topic_catalog() if t.name == catalog_name)
    replication = replication_factor or spec.replication_factor or 1
    config: dict[str, str] = {}
    if spec.cleanup_policy is not None:
        config["cleanup.policy"] = spec.cleanup_policy
    if spec.retention_ms is not None:
        config["retention.ms"] = str(spec.retention_ms)
    if spec.min_insync_replicas is not None:
        config["min.insync.replicas"] = str(min(spec.min_insync_replicas, replication))
    if spec.max_message_bytes is not None:
        config["max.message.bytes"] = str(spec.max_message_bytes)
    return TopicRequest(name, partitions or spec.partitions or 1, replication, config)
