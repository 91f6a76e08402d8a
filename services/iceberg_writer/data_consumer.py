"""The data consumer's partitions: which are assigned, paused, resumed or sought, and the
replacement of a consumer that fell out of its group."""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from services.iceberg_writer.state import TableState
from shared.kafka import GroupMembership

log = logging.getLogger("services.iceberg_writer")


class DataConsumer:
    """Owns the data consumer. ``paused(state)`` says whether an operator paused a table
    (:meth:`services.iceberg_writer.control_view.ControlView.is_paused`)."""

    def __init__(
        self,
        consumer: Consumer,
        paused: Callable[[TableState], bool],
        new_consumer: Callable[[], Consumer] | None = None,
    ) -> None:
        self.consumer = consumer
        self.membership = GroupMembership()
        self._paused = paused
        self._new_consumer = new_consumer  # replaces a consumer that fell out of its group
        self._rejoin = False

    def assigned(self, state: TableState) -> list[TopicPartition]:
        """The partitions of ``state``'s topic assigned to this consumer."""
        return [tp for tp in self.consumer.assignment() if tp.topic == state.topic]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.consumer.pause(partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.consumer.resume(partitions)

    def seek(self, partition: TopicPartition) -> None:
        self.consumer.seek(partition)

    def apply_pause(self, state: TableState) -> None:
        """Pause the table's partitions while an operator or a full held batch holds it;
        otherwise resume those not waiting for a schema plan."""
        assigned = self.assigned(state)
        if not assigned:
            return
        if self._paused(state) or state.bulk_paused:
            self.consumer.pause(assigned)
        else:
            waiting = set(state.waits)
            self.consumer.resume([tp for tp in assigned if (tp.topic, tp.partition) not in waiting])

    def lost(self) -> bool:
        """Whether the consumer has been out of its group too long and can be replaced
        (``shared.kafka.GroupMembership``)."""
        if self._new_consumer is None:
            return False
        return self._rejoin or self.membership.lost(self.consumer)

    def rejoin(self) -> None:
        """Have the consumer replaced at the next round: another instance claimed
        partitions it holds, so its view of the group is stale (``ownership.py``)."""
        self._rejoin = True

    def commit_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        """Commit ``offsets`` to the group without waiting (for its lag, never read back).
        A failure (a rebalance in progress, the broker away) is left to the next commit."""
        partitions = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        try:
            self.consumer.commit(offsets=partitions, asynchronous=True)
        except Exception as exc:
            log.debug("group offsets not committed", extra={"error": str(exc)})

    def replace(self) -> None:
        """Close the consumer and take a new one (not subscribed yet)."""
        assert self._new_consumer is not None
        if self._rejoin:
            log.warning("partitions moved to another instance, rejoining the group")
        else:
            log.warning(
                "data consumer out of its group, subscribing a new one",
                extra={"after_s": self.membership.limit_s},
            )
        self._rejoin = False
        self.membership.reset()
        try:
            self.consumer.close()
        except Exception as exc:  # closing a consumer in that state must not stop the writer
            log.warning("closing the old data consumer failed", extra={"error": str(exc)})
        self.consumer = self._new_consumer()
