"""The Flink SQL job of ``icefjord bench peer``: a Debezium topic into an Iceberg table.

Set up as a Flink user would (Flink 1.20 SQL through PyFlink from PyPI, the Kafka connector
and Iceberg's Flink runtime from Maven Central): a Kafka source table in the
``debezium-json`` format over Kafka Connect's JsonConverter with schemas, and an Iceberg
table in upsert mode (format v2, equality deletes) in the same JDBC catalog Icefjord uses.
Flink commits to Iceberg and the source's offsets to Kafka at each checkpoint.

Run with PyFlink's Python, not the project's (the bench command does both):

    <flink venv>/bin/python deploy/peer-flink/job.py --config job.json

The config names the topic, the table, the catalog, the jars and the decimal columns'
scales; the job runs until it is stopped.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pyflink.table import EnvironmentSettings, TableEnvironment

SOURCE = """
CREATE TABLE debezium_source (
    id BIGINT,
    name STRING,
    amount BYTES,
    quantity INT,
    updated_at STRING,
    `day` INT,
    PRIMARY KEY (id) NOT ENFORCED
) WITH (
    'connector' = 'kafka',
    'topic' = '{topic}',
    'properties.bootstrap.servers' = '{bootstrap}',
    'properties.group.id' = '{group}',
    'scan.startup.mode' = 'earliest-offset',
    'format' = 'debezium-json',
    'debezium-json.schema-include' = 'true'
)
"""

CATALOG = """
CREATE CATALOG `{catalog_name}` WITH (
    'type' = 'iceberg',
    'catalog-impl' = 'org.apache.iceberg.jdbc.JdbcCatalog',
    'catalog-name' = '{catalog_name}',
    'uri' = '{uri}',
    'jdbc.schema-version' = 'V1',
    'warehouse' = '{warehouse}'
)
"""

SINK = """
CREATE TABLE `{catalog_name}`.`{namespace}`.`{table}` (
    id BIGINT,
    name STRING,
    amount DECIMAL(14, 2),
    quantity INT,
    updated_at TIMESTAMP_LTZ(6),
    `day` DATE,
    PRIMARY KEY (id) NOT ENFORCED
) WITH (
    'format-version' = '2',
    'write.upsert.enabled' = 'true'
)
"""

INSERT = """
INSERT INTO `{catalog_name}`.`{namespace}`.`{table}`
SELECT id, name, CAST(debezium_decimal(amount, {amount_scale}) AS DECIMAL(14, 2)), quantity,
       zoned_timestamp(updated_at), epoch_day(`day`)
FROM debezium_source
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    config = json.loads(parser.parse_args().config.read_text())
    # Every jar on the JVM's own classpath, as a Flink user copies connectors into Flink's
    # lib/: Flink loads Hadoop's classes parent-first, Iceberg finds its catalog classes by
    # name, and the planner compiles calls to the functions (PyFlink's gateway puts
    # HADOOP_CLASSPATH on its classpath; pipeline.jars or ADD JAR reach none of the three).
    os.environ["HADOOP_CLASSPATH"] = os.pathsep.join(config["jars"])
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("parallelism.default", str(config["parallelism"]))
    conf.set("execution.checkpointing.interval", f"{config['checkpoint_seconds']}s")
    conf.set("taskmanager.memory.process.size", "2g")
    for name, cls in (
        ("debezium_decimal", "io.icefjord.peer.DebeziumDecimal"),
        ("epoch_day", "io.icefjord.peer.EpochDay"),
        ("zoned_timestamp", "io.icefjord.peer.ZonedTimestamp"),
    ):
        env.create_java_temporary_system_function(name, cls)
    env.execute_sql(SOURCE.format(**config))
    env.execute_sql(CATALOG.format(**config))
    env.execute_sql("CREATE DATABASE IF NOT EXISTS `{catalog_name}`.`{namespace}`".format(**config))
    env.execute_sql(SINK.format(**config))
    result = env.execute_sql(INSERT.format(**config))
    print("job submitted", flush=True)
    result.wait()


if __name__ == "__main__":
    main()
