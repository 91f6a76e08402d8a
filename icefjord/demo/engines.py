"""The demo's proof read by every engine an analyst uses, during the run and after it.

Spark is the demo's own reader (:func:`~icefjord.demo.verify.spark_reader`). With more
engines asked for (``icefjord demo --readers``), each one reads every table too
(:mod:`icefjord.readers.engines`: pyiceberg to Arrow, to pandas and through DuckDB, DuckDB's
own iceberg extension, Trino started for the run):

- **after the run**, every engine's read is compared with the source, as Spark's is;
- **during the run** (``probes``), the current snapshot of every table is pinned, and
  every engine reads those same snapshots. The source has moved on by then, so each read
  is compared with Spark's read of the snapshot, which the final proof holds equal to the
  source. A table with a key twice, a row one engine lacks, or an engine that cannot read
  a table at all fails the probe.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from icefjord.demo.verify import (
    IcebergReader,
    SourceTable,
    TableReport,
    VerifyReport,
    compare_table,
)
from icefjord.local.settings import LocalSettings
from shared.errors import IcefjordError

ENGINES = ("spark", "pyiceberg", "pyiceberg-pandas", "pyiceberg-duckdb", "duckdb", "trino")
"""The engines the demo can read with; Spark always reads."""


def parse_engines(text: str) -> tuple[str, ...]:
    """``"spark,duckdb"`` or ``"all"`` as engine names, Spark first. Raises ValueError
    naming an unknown engine."""
    names = list(ENGINES) if text.strip() == "all" else [n.strip() for n in text.split(",")]
    unknown = [n for n in names if n and n not in ENGINES]
    if unknown:
        raise ValueError(f"unknown engine {', '.join(unknown)}; choose from {', '.join(ENGINES)}")
    return ("spark", *[n for n in ENGINES if n in names and n != "spark"])


def probe_times(duration_s: float, probes: int, seed: int) -> list[float]:
    """``probes`` seconds into a workload of ``duration_s``, at random between a fifth and
    nine tenths of it (tables exist and change there)."""
    rng = random.Random(seed * 7919 + probes)
    return sorted(rng.uniform(0.2, 0.9) * duration_s for _ in range(probes))


@dataclass(frozen=True)
class Probe:
    """One moment of the run: each engine's read of every table at the same snapshots,
    compared with Spark's read of them."""

    at_s: float
    snapshots: dict[str, int]
    reports: dict[str, VerifyReport]
    seconds: dict[str, float]
    """Each engine's seconds to read every table (Spark's included)."""

    @property
    def ok(self) -> bool:
        return bool(self.snapshots) and all(r.ok for r in self.reports.values())

    def describe(self) -> str:
        verdicts = ", ".join(
            f"{engine} {'equal' if r.ok else 'DIFFERENT'} ({self.seconds[engine]:.1f} s)"
            for engine, r in self.reports.items()
        )
        return (
            f"probe at {self.at_s:.0f} s: {len(self.snapshots)} tables at pinned snapshots, "
            f"Spark {self.seconds.get('spark', 0.0):.1f} s: {verdicts or 'no engine but Spark'}"
        )


def verify_session(settings: LocalSettings) -> Any:
    """The SparkSession the demo verifies with (small: the services have their own)."""
    from shared.settings import CatalogSettings
    from shared.spark import SparkSettings, build_spark_session

    jars = str(settings.dist_dir / f"spark-jars-{settings.iceberg_version}" / "*.jar")
    return build_spark_session(
        "icefjord-demo-verify",
        SparkSettings(master="local[2]", driver_memory="1g", jars=jars),
        CatalogSettings(name=settings.catalog_name, local_state_dir=settings.state),
    )


class DemoEngines:
    """The engines' readers for one run; Spark's session and Trino live until :meth:`close`."""

    def __init__(
        self, settings: LocalSettings, engines: Sequence[str], log: Callable[[str], None]
    ) -> None:
        from shared.catalog import catalog_properties, open_catalog
        from shared.settings import CatalogSettings

        self.engines = tuple(engines)
        self._settings = settings
        catalog = CatalogSettings(name=settings.catalog_name, local_state_dir=settings.state)
        self._catalog = open_catalog(catalog)
        self._properties = catalog_properties(catalog)
        self._spark = verify_session(settings)
        self._trino: Any = None
        if "trino" in self.engines:
            from icefjord.readers.trino import TrinoServer

            self._trino = TrinoServer(settings, settings.catalog_name, self._properties)
            seconds = self._trino.start(log)
            log(f"Trino {settings.trino_version} ready in {seconds:.1f} s on {self._trino.url}")

    def reader(self, engine: str, snapshots: dict[str, int] | None = None) -> IcebergReader:
        """``engine``'s reader, at ``snapshots`` where given (table -> snapshot id)."""
        from icefjord.readers import engines as readers

        name = self._settings.catalog_name
        if engine == "spark":
            return readers.spark_snapshot_reader(self._spark, name, snapshots)
        if engine == "pyiceberg":
            return readers.pyiceberg_arrow(self._catalog, snapshots)
        if engine == "pyiceberg-pandas":
            return readers.pyiceberg_pandas(self._catalog, snapshots)
        if engine == "pyiceberg-duckdb":
            return readers.pyiceberg_duckdb(self._catalog, snapshots)
        if engine == "duckdb":
            return readers.duckdb_iceberg(self._catalog, self._properties, snapshots)
        if engine == "trino" and self._trino is not None:
            host, port = self._settings.host, self._settings.trino_port
            return readers.trino_reader(host, port, name, snapshots)
        raise ValueError(f"engine {engine} is not open in this run")

    def verify(self, sources: Sequence[SourceTable]) -> dict[str, VerifyReport]:
        """Every engine's read of every table compared with its source."""
        return {engine: self._compare(sources, engine, None) for engine in self.engines}

    def probe(self, sources: Sequence[SourceTable], at_s: float) -> Probe:
        """Pin every table's current snapshot; each engine's read of them compared with
        Spark's (the source's rows are not used: only its columns and key)."""
        from icefjord.readers.engines import pin_snapshots

        began = time.monotonic()
        seconds: dict[str, float] = {}
        tables = [s for s in sources if self._catalog.table_exists(s.identifier)]
        pinned = pin_snapshots(self._catalog, [s.identifier for s in tables])
        spark = self.reader("spark", pinned)
        references: list[SourceTable] = []
        for source in tables:
            if source.identifier not in pinned:
                continue
            read = spark(source.namespace, source.name)
            if read is None:
                continue
            columns = tuple(c for c in source.columns if c.name in read.columns)
            references.append(
                SourceTable(source.namespace, source.name, columns, source.key, read.rows)
            )
        seconds["spark"] = time.monotonic() - began
        reports: dict[str, VerifyReport] = {}
        for engine in self.engines:
            if engine != "spark":
                began = time.monotonic()
                reports[engine] = self._compare(references, engine, pinned)
                seconds[engine] = time.monotonic() - began
        return Probe(at_s, pinned, reports, seconds)

    def _compare(
        self, sources: Sequence[SourceTable], engine: str, snapshots: dict[str, int] | None
    ) -> VerifyReport:
        """Each of ``sources`` compared with ``engine``'s read; a table the engine cannot
        read fails with the engine's reason."""
        read = self.reader(engine, snapshots)
        reports: list[TableReport] = []
        for source in sources:
            try:
                rows = read(source.namespace, source.name)
            except (IcefjordError, RuntimeError, ValueError, OSError) as exc:
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                reports.append(
                    TableReport(
                        source.identifier,
                        len(source.rows),
                        0,
                        0,
                        0,
                        table_missing=True,
                        samples=(f"{engine} cannot read it: {reason}",),
                    )
                )
                continue
            reports.append(compare_table(source, rows))
        return VerifyReport(tuple(reports))

    def close(self) -> None:
        if self._trino is not None:
            with contextlib.suppress(Exception):
                self._trino.stop()
        self._spark.stop()


@contextlib.contextmanager
def demo_engines(
    settings: LocalSettings, engines: Sequence[str], log: Callable[[str], None]
) -> Iterator[DemoEngines]:
    opened = DemoEngines(settings, engines, log)
    try:
        yield opened
    finally:
        opened.close()
