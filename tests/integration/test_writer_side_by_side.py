"""Two writer instances' upsert commits on one table, one landing while the other is made.

Each instance of a writer group commits the keys of the partitions it owns, with its
claims of them (``services/iceberg_writer/ownership.py``) checked by the guard at the
catalog's swap (``deploy/iceberg-lease-guard``). Here the second instance's commit is built
on the snapshot before the first one's and committed after it, as two instances' commits
overlap when they run side by side: both delete rows of the same data file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from services.iceberg_writer import upserts
from services.iceberg_writer.ownership import owner_key
from services.iceberg_writer.types import STAGING_FLAG
from services.iceberg_writer.upserts import write_upserts

pytestmark = pytest.mark.timeout(300)

FIRST = "writers/0/first"
SECOND = "writers/0/second"
ROWS = 20


def _create(spark: Any, table: str, version: int) -> None:
    """An unpartitioned table of ROWS rows in one data file, with partition 0 claimed by
    FIRST and partition 1 by SECOND, as each instance claims its partitions."""
    spark.sql(
        f"""CREATE TABLE icefjord.{table} (id BIGINT NOT NULL, v STRING) USING iceberg
        TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read',
                       'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read',
                       '{owner_key(0)}'='{FIRST}', '{owner_key(1)}'='{SECOND}')"""
    )
    spark.sql(f"ALTER TABLE icefjord.{table} SET IDENTIFIER FIELDS id")
    rows = [(k, "v0") for k in range(ROWS)]
    spark.createDataFrame(rows, "id long, v string").coalesce(1).writeTo(
        f"icefjord.{table}"
    ).append()


def _batch(changes: list[tuple[int, str | None]]) -> pa.Table:
    """Changes as the writer stages them: a value of None deletes the key."""
    return pa.table(
        {
            "id": pa.array([k for k, _ in changes], pa.int64()),
            "v": [v or "" for _, v in changes],
            STAGING_FLAG: [v is None for _, v in changes],
        }
    )


def _contents(spark: Any, table: str) -> dict[int, str]:
    rows = spark.sql(f"SELECT id, v FROM icefjord.{table}").collect()
    out = {r.id: r.v for r in rows}
    assert len(out) == len(rows), "an id appears twice"
    return out


def _snapshots(spark: Any, table: str) -> int:
    return int(spark.sql(f"SELECT count(*) AS n FROM icefjord.{table}.snapshots").first().n)


def _second_over_first(
    monkeypatch: pytest.MonkeyPatch,
    spark: Any,
    table: str,
    meanwhile: Callable[[], None],
    claims: dict[str, str] | None,
) -> None:
    """SECOND's upsert of keys 2 and 3 (an update and a delete), planned on the table as
    it is, with ``meanwhile`` run after its plan and before its commit."""
    validate = upserts._validate_deletes_in
    ran: list[bool] = []

    def interleaved(*args: Any, **kwargs: Any) -> None:
        if not ran:
            ran.append(True)
            monkeypatch.setattr(upserts, "_validate_deletes_in", validate)
            meanwhile()
        validate(*args, **kwargs)

    monkeypatch.setattr(upserts, "_validate_deletes_in", interleaved)
    target = f"icefjord.{table}"
    write_upserts(spark, target, _batch([(2, "second"), (3, None)]), ["id"], {}, claims=claims)
    assert ran, "the commit deleted no stored row"


def _first(spark: Any, table: str) -> Callable[[], None]:
    """FIRST's upsert of keys 0 and 1, rows of the same data file as SECOND's keys."""

    def commit() -> None:
        batch = _batch([(0, "first"), (1, None)])
        claims = {owner_key(0): FIRST}
        write_upserts(spark, f"icefjord.{table}", batch, ["id"], {}, claims=claims)

    return commit


def test_instances_deleting_in_one_data_file_both_commit(
    monkeypatch: pytest.MonkeyPatch, spark: Any, namespace: str
) -> None:
    """Format v2: each instance's deletes are its own position delete file, and a commit
    with its claims lands beside the other instance's, which deleted other keys."""
    table = f"{namespace}.side_by_side"
    _create(spark, table, 2)
    _second_over_first(monkeypatch, spark, table, _first(spark, table), {owner_key(1): SECOND})
    expected = {k: "v0" for k in range(ROWS) if k not in (1, 3)} | {0: "first", 2: "second"}
    assert _contents(spark, table) == expected


@pytest.mark.parametrize(
    ("version", "claims"), [(2, False), (3, True)], ids=["v2-without-claims", "v3"]
)
def test_an_overlapping_commit_conflicts_without_claims_and_on_deletion_vectors(
    monkeypatch: pytest.MonkeyPatch, spark: Any, namespace: str, version: int, claims: bool
) -> None:
    """Without claims, Iceberg's check for concurrent delete files refuses the later commit
    (it cannot tell whose rows they delete). On format v3 a data file has one deletion
    vector, so the later commit's vector, merged from the earlier one, is refused even
    with claims. Either way nothing of it lands, and planned again it goes in."""
    table = f"{namespace}.overlap_v{version}"
    _create(spark, table, version)
    owned = {owner_key(1): SECOND} if claims else None
    with pytest.raises(Exception, match="ValidationException"):
        _second_over_first(monkeypatch, spark, table, _first(spark, table), owned)
    assert _contents(spark, table) == {k: "v0" for k in range(ROWS) if k != 1} | {0: "first"}
    target = f"icefjord.{table}"
    write_upserts(spark, target, _batch([(2, "second"), (3, None)]), ["id"], {}, claims=owned)
    expected = {k: "v0" for k in range(ROWS) if k not in (1, 3)} | {0: "first", 2: "second"}
    assert _contents(spark, table) == expected


def test_a_commit_of_a_partition_claimed_meanwhile_is_refused_at_the_swap(
    monkeypatch: pytest.MonkeyPatch, spark: Any, namespace: str
) -> None:
    """An instance that lost partition 1 in a rebalance it has not seen yet: the claim of
    the new owner goes in while its commit is made, and the guard refuses the commit
    Iceberg builds on the new metadata. No snapshot, no change of the table."""
    table = f"{namespace}.claimed_meanwhile"
    _create(spark, table, 2)
    snapshots = _snapshots(spark, table)

    def claim() -> None:
        spark.sql(f"ALTER TABLE icefjord.{table} SET TBLPROPERTIES ('{owner_key(1)}'='{FIRST}')")

    with pytest.raises(Exception, match="ClaimLostException"):
        _second_over_first(monkeypatch, spark, table, claim, {owner_key(1): SECOND})
    assert _snapshots(spark, table) == snapshots
    assert _contents(spark, table) == {k: "v0" for k in range(ROWS)}
