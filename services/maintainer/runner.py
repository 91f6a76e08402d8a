"""The maintainer's Spark side: Iceberg procedures and actions on one SparkSession.

:class:`SparkProcedureRunner` is what ``execute.MaintenanceExecutor`` runs its statements
through (``execute.ProcedureRunner`` is the seam its unit tests fake): the SQL procedures,
orphan removal under the procedures' 24 h floor through Iceberg's action API, and the
removal of equality delete files a compaction left dangling.
"""

from __future__ import annotations

import logging
from typing import Any

from shared.spark import java

log = logging.getLogger(__name__)


class SparkProcedureRunner:
    """Runs statements on one SparkSession; orphans under 24 h through the action API."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark

    def sql(self, statement: str) -> list[dict[str, Any]]:
        log.debug("running procedure", extra={"sql": statement})
        return [row.asDict() for row in self._spark.sql(statement).collect()]

    def delete_orphans(self, table: str, older_than_ms: int) -> list[str]:
        """``table`` is the quoted, catalog-qualified name; returns the deleted locations."""
        jvm = self._spark._jvm
        session = self._spark._jsparkSession
        loaded = java(jvm).org.apache.iceberg.spark.Spark3Util.loadIcebergTable(session, table)
        actions = java(jvm).org.apache.iceberg.spark.actions.SparkActions.get(session)
        action = actions.deleteOrphanFiles(loaded).olderThan(older_than_ms)
        # Listed through the table's FileIO, as remove_orphan_files_sql does.
        result = action.usePrefixListing(True).execute()
        iterator = result.orphanFileLocations().iterator()
        deleted: list[str] = []
        while iterator.hasNext():
            deleted.append(str(iterator.next()))
        return deleted

    def drop_dangling_equality_deletes(self, table: str) -> int:
        """Remove the equality delete files of ``table`` that no live data file needs any
        more; return how many.

        An equality delete applies to the data files of a lower data sequence number in its
        scope: the whole table for a delete of an unpartitioned spec (every delete of an
        unpartitioned table, and the writer's global ones in a table partitioned by a value),
        else its own partition. After a compaction every live data file has one at least as
        high as the deletes it applied, so those deletes are dead weight that every scan
        still plans. Iceberg's ``remove-dangling-deletes`` skips unpartitioned tables (it
        counts on each commit dropping them, which it does not do for equality deletes) and
        fails when a commit lands while it runs (the writer's upserts do, under the lease),
        so this does it: one commit that removes exactly the delete files whose sequence
        number is at most the lowest of the live data files in their scope. A concurrent
        commit cannot make one of them needed again (new data files get higher sequence
        numbers), so the commit may retry freely."""
        jvm = self._spark._jvm
        iceberg = java(jvm).org.apache.iceberg
        loaded = iceberg.spark.Spark3Util.loadIcebergTable(self._spark._jsparkSession, table)
        snapshot = loaded.currentSnapshot()
        if snapshot is None:
            return 0
        io, specs = loaded.io(), loaded.specs()
        scoped = not loaded.spec().isUnpartitioned()
        # The lowest live data sequence number in the table (key None) and, in a
        # partitioned table, in each partition (key: spec id and partition).
        lowest: dict[tuple[int, str] | None, int] = {}
        for manifest in snapshot.dataManifests(io):
            files = iceberg.ManifestFiles.read(manifest, io, specs).iterator()
            while files.hasNext():
                data = files.next()
                sequence = int(data.dataSequenceNumber())
                scopes: list[tuple[int, str] | None] = [None]
                if scoped:
                    scopes.append((int(data.specId()), str(data.partition().toString())))
                for scope in scopes:
                    lowest[scope] = min(lowest.get(scope, sequence), sequence)
        rewrite = loaded.newRewrite()
        dropped = 0
        for manifest in snapshot.deleteManifests(io):
            deletes = iceberg.ManifestFiles.readDeleteManifest(manifest, io, specs).iterator()
            while deletes.hasNext():
                delete = deletes.next()
                if str(delete.content().toString()) != "EQUALITY_DELETES":
                    continue
                spec_id = int(delete.specId())
                scope = (
                    None
                    if specs.get(spec_id).isUnpartitioned()
                    else (spec_id, str(delete.partition().toString()))
                )
                floor = lowest.get(scope)
                if floor is None or int(delete.dataSequenceNumber()) <= floor:
                    rewrite.deleteFile(delete)
                    dropped += 1
        if dropped:
            rewrite.commit()
        return dropped
