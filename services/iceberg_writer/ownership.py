"""Which writer instance owns each partition of a table's changes: claims in the table.

Several writer instances in one consumer group share a table: Kafka assigns each partition
of the table's change topic to one of them, and each commits the changes of its own
partitions, with those partitions' next offsets in the snapshot summary
(``tables.checkpoint_of`` takes each partition's offset from the newest commit that
carries it). Kafka's assignment alone does not stop a writer that has lost a partition
without knowing it yet (out of its group after a long pause, or a network split) from
committing it, so the table records the owner of each partition:

- on assignment, a writer claims its partitions of the table (one property per partition,
  ``icefjord.writer.owner.<partition>``, set in one metadata commit), and only then reads
  their offsets from the table: a previous owner's commits made after the claim are refused
  (below), so none can land behind the offsets just read;
- a previous owner's commit already under way when the claim went in can still land after
  the offsets were read; before each commit, a writer looks at the commits made since it
  last looked, and one that recorded an owned partition further than this instance read
  means its changes are in: it reads on from there (:class:`OvertakenError`, retryable)
  instead of applying them twice;
- before each commit it checks every partition it is about to record is still claimed by
  it. A partition claimed by another instance of the same group moved in a rebalance this
  writer has not seen: its changes are dropped and the writer rejoins the group
  (:class:`PartitionsMovedError`, retryable). One claimed by a writer of another group means
  two deployments write one table: the older one is fenced and stops
  (:class:`~services.iceberg_writer.tables.FencedError`).

A claim is set, not compared: Kafka's assignment decides who owns a partition, and the
newest claim is the newest assignment's. Claims are properties, so each instance's claim
commit leaves the others' partitions alone, and Iceberg re-applies it on top of a
concurrent commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shared.errors import RetryableError

OWNER_PREFIX = "icefjord.writer.owner."


def owner_key(partition: int) -> str:
    """The table property naming the owner of ``partition`` of the table's change topic."""
    return f"{OWNER_PREFIX}{partition}"


class PartitionsMovedError(RetryableError):
    """Another instance of this writer's group claimed partitions this one still holds:
    a rebalance moved them. The writer drops their changes and rejoins its group."""


class OvertakenError(RetryableError):
    """Another instance committed changes of partitions this one owns beyond the offsets
    this one read: a previous owner's commit that was already under way when this
    instance claimed them. The writer drops its uncommitted changes and reads on from the
    table's offsets, so they are not applied twice."""


@dataclass(frozen=True, slots=True)
class Owner:
    """One writer instance: its consumer group, its epoch and a random instance id (two
    instances started with the same configured epoch still differ)."""

    group: str
    epoch: int
    instance: str

    @classmethod
    def new(cls, group: str, epoch: int) -> Owner:
        return cls(group, epoch, uuid.uuid4().hex[:12])

    @property
    def token(self) -> str:
        return f"{self.group}/{self.epoch}/{self.instance}"

    def claims(self, partitions: Iterable[int]) -> dict[str, str]:
        """The table properties that claim ``partitions`` for this instance."""
        return {owner_key(p): self.token for p in sorted(set(partitions))}


def group_of(token: str) -> str:
    """The consumer group of a claim's owner (a group name may hold ``/``)."""
    return token.rsplit("/", 2)[0]


@dataclass(frozen=True, slots=True)
class Lost:
    """Partitions whose claim another instance holds: ``moved`` to an instance of this
    group, or ``taken`` by a writer of another group (partition -> its token)."""

    moved: tuple[int, ...] = ()
    taken: Mapping[int, str] | None = None

    def __bool__(self) -> bool:
        return bool(self.moved or self.taken)


def lost_claims(properties: Mapping[str, str], partitions: Iterable[int], owner: Owner) -> Lost:
    """Which of ``partitions`` the table's ``properties`` say another instance owns. A
    partition nobody claimed yet is not lost (a table made before claims existed, or
    before this writer's claim of a partition of a new table went in)."""
    moved: list[int] = []
    taken: dict[int, str] = {}
    for partition in sorted(set(partitions)):
        token = properties.get(owner_key(partition))
        if token is None or token == owner.token:
            continue
        if group_of(token) == owner.group:
            moved.append(partition)
        else:
            taken[partition] = token
    return Lost(tuple(moved), taken or None)
