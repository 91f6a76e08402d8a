"""Run by ``test_spark_localfs.py`` in a process of its own (a JVM's classpath and its
``file://`` implementation are fixed when it starts): write an Iceberg table on the local
file system with Spark while Java Flight Recorder records every process the JVM starts,
and print what happened as JSON.

Usage: ``python spark_localfs_probe.py <warehouse dir> <jfr file> <Spark jars glob>
[<localfs jar> <class>]``.
"""

from __future__ import annotations

import glob
import json
import stat
import sys
from pathlib import Path

from pyspark.sql import SparkSession


def main() -> None:
    warehouse, recording = Path(sys.argv[1]), Path(sys.argv[2])
    builder = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Not the usual 022, so the modes show that Hadoop's umask is applied.
        .config("spark.hadoop.fs.permissions.umask-mode", "027")
        .config("spark.jars", ",".join(sorted(glob.glob(sys.argv[3]))))
        .config("spark.sql.catalog.probe", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.probe.type", "hadoop")
        .config("spark.sql.catalog.probe.warehouse", f"file://{warehouse}")
    )
    if len(sys.argv) > 5:
        builder = builder.config("spark.driver.extraClassPath", sys.argv[4]).config(
            "spark.hadoop.fs.file.impl", sys.argv[5]
        )
    spark = builder.getOrCreate()
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), hadoop_conf)
    jfr = jvm.jdk.jfr.Recording()
    jfr.enable("jdk.ProcessStart")
    jfr.start()
    spark.sql("CREATE TABLE probe.db.t (id bigint, name string) USING iceberg")
    spark.range(5).selectExpr("id", "concat('row ', id) AS name").writeTo("probe.db.t").append()
    spark.sql("DELETE FROM probe.db.t WHERE id = 3")
    rows = sorted(tuple(r) for r in spark.table("probe.db.t").collect())
    jfr.stop()
    path = jvm.java.io.File(str(recording)).toPath()
    jfr.dump(path)
    events = jvm.jdk.jfr.consumer.RecordingFile.readAllEvents(path)
    commands = [str(e.getString("command")) for e in events]
    table = warehouse / "db" / "t"
    files = [p for p in table.rglob("*") if p.is_file()]
    print(
        json.dumps(
            {
                "file_system": str(fs.getClass().getName()),
                "rows": rows,
                "commands": commands,
                "modes": sorted({oct(stat.S_IMODE(p.stat().st_mode)) for p in files}),
                "dir_modes": sorted(
                    {oct(stat.S_IMODE(p.stat().st_mode)) for p in table.rglob("*") if p.is_dir()}
                ),
                "files": len([p for p in files if not p.name.endswith(".crc")]),
                "checksums": len([p for p in files if p.name.endswith(".crc")]),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
