"""The compaction lease: how the maintainer and iceberg-writer take turns on one table.

A data-file rewrite cannot commit when the writer has meanwhile deleted rows (deletion
vectors or position deletes) in a file being rewritten: Iceberg rejects the rewrite. Under
updates spread evenly over a table nearly every writer commit does that, so a compaction
retried without coordination can lose every race. The maintainer therefore holds a lease
while it rewrites: the table property :data:`LEASE_PROPERTY` carries the Unix time in ms
until which the writer holds back its commits to that table (it keeps reading; changes
wait in memory and go in the first commit after the lease). The lease ends when the
maintainer removes the property, or by itself at that time if the maintainer dies.

Why a table property rather than a control event: it is read in the same catalog load the
writer makes before every commit anyway (the epoch check), so there is no ordering question
between a Kafka topic and the catalog, and no acknowledgement to wait for; and it outlives
restarts of either service without any state of their own.

The writer holds back every commit that deletes rows in stored files or reads them: its
MERGE, insert, replace and upsert paths (the upsert path's deletes are deletion vectors of
the stored files since 2026-11-28; its equality deletes before, which a rewrite's
validation ignores, let it go ahead). Only an append to an empty table goes ahead
(:data:`PATHS_NOT_HELD`, ``services.iceberg_writer.changes.Path.waits_for_lease``). Each
``CommitDone`` names its path (``write_path``), so the maintainer knows whether the writer
is waiting for a rewrite (:func:`holds_writer_back`) and raises its own CPU priority only
then.

The writer looks at the lease before it plans a commit; a lease taken after that look is
caught on the Java side: the upsert path commits through the lease guard
(``deploy/iceberg-lease-guard``), which reads the same property, with the same rule as
:func:`leased`, from the metadata each commit attempt is built on, and refuses the attempt.
"""

from __future__ import annotations

from collections.abc import Mapping

LEASE_PROPERTY = "icefjord.maintenance.lease-until-ms"

PATHS_NOT_HELD = frozenset({"append"})
"""The writer's paths (``CommitDone.write_path``) whose commits go ahead under a lease."""


def lease_until_ms(properties: Mapping[str, str]) -> int | None:
    """The lease's end in the table's properties; None when there is none or it is unreadable
    (an unreadable lease must not stop the writer)."""
    raw = properties.get(LEASE_PROPERTY)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def leased(properties: Mapping[str, str], now_ms: int) -> bool:
    """True while a lease in ``properties`` has not yet run out at ``now_ms``."""
    until = lease_until_ms(properties)
    return until is not None and until > now_ms


def holds_writer_back(write_path: str | None) -> bool:
    """Whether a lease holds back the writer's commits, judged by the path of its last
    commit to the table. True when that is unknown (no commit seen yet, or a writer older
    than ``control_event`` v4): a held-back writer is the side to err on."""
    return write_path not in PATHS_NOT_HELD
