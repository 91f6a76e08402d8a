"""What Hadoop's chmod processes cost an Iceberg commit on a local warehouse.

Runs N small Spark appends to an Iceberg table (Hadoop catalog, a temporary directory) in a
fresh JVM, after 20 untimed ones, and prints the JVM's CPU per append (its reaped children,
the chmod processes, included) and the wall time per append. The file system is Hadoop's
own, or Icefjord's ``NioLocalFileSystem`` (``deploy/spark-localfs``, built by
``icefjord local up``):

    .venv/bin/python icefjord/bench/experiments/appends_ab.py hadoop
    .venv/bin/python icefjord/bench/experiments/appends_ab.py icefjord

Run the two alternately, on an otherwise idle machine.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from pyspark.sql import SparkSession

from icefjord.local.artifacts import LOCALFS_CLASS, dist_for
from icefjord.local.settings import LocalSettings

APPENDS = 60


def main() -> None:
    mode = sys.argv[1]
    warehouse = tempfile.mkdtemp(prefix="appends-ab-")
    dist = dist_for(LocalSettings())
    builder = (
        SparkSession.builder.master("local[*]")
        .config("spark.jars", ",".join(str(jar) for jar in dist.spark_jars))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.defaultJavaOptions", "-XX:+UseParallelGC")
        .config("spark.sql.catalog.ab", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.ab.type", "hadoop")
        .config("spark.sql.catalog.ab.warehouse", f"file://{warehouse}")
    )
    if mode == "icefjord":
        jar = dist.localfs_jar
        assert jar is not None and jar.is_file(), "run `icefjord local up` first"
        builder = builder.config("spark.driver.extraClassPath", str(jar)).config(
            "spark.hadoop.fs.file.impl", LOCALFS_CLASS
        )
    spark = builder.getOrCreate()
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pid = int(jvm.java.lang.ProcessHandle.current().pid())

    def cpu_s() -> float:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    spark.sql("CREATE TABLE ab.db.t (id bigint, v string) USING iceberg")
    rows = spark.range(100).selectExpr("id", "cast(id AS string) AS v")
    for _ in range(20):
        rows.writeTo("ab.db.t").append()
    cpu0, wall0 = cpu_s(), time.monotonic()
    for _ in range(APPENDS):
        rows.writeTo("ab.db.t").append()
    cpu, wall = cpu_s() - cpu0, time.monotonic() - wall0
    print(
        f"{mode}: {APPENDS} appends, {cpu / APPENDS * 1000:.0f} ms CPU and "
        f"{wall / APPENDS * 1000:.0f} ms wall per append"
    )
    spark.stop()


if __name__ == "__main__":
    main()
