"""Spark as a cluster: the writer's MERGE and the maintainer's compaction on a real Spark
standalone cluster, a master and a worker started with the pinned pyspark's own
``bin/spark-class``.

In standalone mode the driver (the service) runs no task itself: every task of a MERGE or a
``rewrite_data_files`` runs in the worker's executor, a JVM of its own that fetches the
Iceberg runtime from the driver (``spark.jars``). The services run as processes, as users
run them, since the tests' own SparkSession is a local one and a process has one session.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest
from changes_support import (
    Event,
    assert_equal_to_model,
    change_schema,
    control_events,
    equal_to_model,
)
from harness import Stack, free_port
from process_support import maintainer_env, ready_process, request_maintenance
from writer_support import producer_for

from shared.events import (
    MaintenanceAction,
    MaintenanceResult,
    MaintenanceStatus,
)
from shared.kafka import TopicRequest, ensure_topics, make_admin

pytestmark = [pytest.mark.timeout(900), pytest.mark.production_layout]

SPARK_HOME = Path(pyspark.__file__).parent
# The executor's share of the worker: small, as the tests' stack runs beside it.
EXECUTOR_CONF = json.dumps({"spark.executor.memory": "512m", "spark.cores.max": "1"})


@dataclass(frozen=True)
class Cluster:
    master: str  # spark://host:port
    ui: str  # the master's web UI, whose /json/ lists workers and applications

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as response:
            state: dict[str, Any] = json.loads(response.read())
        return state

    def applications(self) -> list[dict[str, Any]]:
        state = self.state()
        return [*state.get("activeapps", []), *state.get("completedapps", [])]


def _spark_class(main: str, *args: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), main, *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and one worker (1 core, 1 GiB) on loopback, for this module."""
    work = tmp_path_factory.mktemp("spark-cluster")
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work),
    }
    port, ui, worker_port, worker_ui = (free_port() for _ in range(4))
    master = _spark_class(
        "org.apache.spark.deploy.master.Master",
        *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
        env=env,
        log=work / "master.log",
    )
    worker = _spark_class(
        "org.apache.spark.deploy.worker.Worker",
        f"spark://127.0.0.1:{port}",
        *("--host", "127.0.0.1", "--port", str(worker_port), "--webui-port", str(worker_ui)),
        *("--cores", "1", "--memory", "1g", "--work-dir", str(work / "work")),
        env=env,
        log=work / "worker.log",
    )
    cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}")
    try:
        deadline = time.monotonic() + 120
        while True:
            for name, process in (("master", master), ("worker", worker)):
                log = (work / f"{name}.log").read_text(errors="replace")[-3000:]
                assert process.poll() is None, f"the {name} exited:\n{log}"
            try:
                if cluster.state().get("aliveworkers", 0) >= 1:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "no worker registered with the master"
            time.sleep(1)
        yield cluster
    finally:
        for process in (worker, master):
            process.terminate()
        for process in (worker, master):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _ran_on_the_cluster(cluster: Cluster, name: str) -> dict[str, Any]:
    """The cluster's application called ``name``, which must have had executor cores."""
    apps = [a for a in cluster.applications() if a.get("name") == name]
    assert apps, f"no application {name!r} on the cluster: {cluster.applications()}"
    assert apps[-1].get("cores", 0) >= 1, apps[-1]
    return apps[-1]


def _wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(2)


def test_the_writers_merge_runs_on_the_cluster(
    stack: Stack, spark: Any, spark_cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    """Inserts, then updates and deletes with the upsert path off: every batch after the
    table's first is a MERGE, whose tasks only the cluster's executor can run."""
    name = f"c_{uuid.uuid4().hex[:8]}"
    table = f"{namespace}.{name}"
    topic = f"icefjord.changes.{table}"
    ensure_topics(make_admin(stack.kafka), [TopicRequest(topic, 2)])
    suffix = uuid.uuid4().hex[:8]
    port = free_port()
    env = {
        "ICEFJORD_WRITER_KAFKA__BOOTSTRAP_SERVERS": stack.kafka.bootstrap_servers,
        "ICEFJORD_WRITER_REGISTRY__URL": stack.registry.url,
        "ICEFJORD_WRITER_CATALOG": stack.catalog.model_dump_json(),
        "ICEFJORD_WRITER_TOPIC_PATTERN": f"^{re.escape(topic)}$",
        "ICEFJORD_WRITER_GROUP_ID": f"writer-{suffix}",
        "ICEFJORD_WRITER_CONTROL_TOPIC": f"control-{suffix}",
        "ICEFJORD_WRITER_DEAD_LETTER_TOPIC": f"dlq-{suffix}",
        "ICEFJORD_WRITER_QUARANTINE_TOPIC": f"quarantine-{suffix}",
        "ICEFJORD_WRITER_TOPIC_REPLICATION_FACTOR": "1",
        "ICEFJORD_WRITER_UPSERT_PATH": "false",
        "ICEFJORD_WRITER_WARM_UP": "false",
        "ICEFJORD_WRITER_FRESHNESS_TARGET_S": "2",
        "ICEFJORD_WRITER_METRICS__HOST": "127.0.0.1",
        "ICEFJORD_WRITER_METRICS__PORT": str(port),
        "ICEFJORD_WRITER_SPARK__MASTER": spark_cluster.master,
        "ICEFJORD_WRITER_SPARK__CONF": EXECUTOR_CONF,
        "ICEFJORD_WRITER_LOG_FORMAT": "console",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    schema = change_schema(namespace, name)
    producer = producer_for(stack, topic)
    inserts = [Event(k, "CREATE", k, name=f"n{k}", amount=f"{k}.50") for k in range(1, 41)]
    changes = [Event(100 + k, "UPDATE", k, name=f"u{k}", amount="1.25") for k in range(1, 21)]
    changes += [Event(200 + k, "DELETE", k) for k in range(30, 36)]
    log = tmp_path / "writer.log"
    with ready_process("services.iceberg_writer", env, log, port):
        producer.send(schema, inserts)
        _wait_for(lambda: equal_to_model(spark, table, inserts), 240, "the inserts never arrived")
        producer.send(schema, changes)
        history = inserts + changes
        _wait_for(lambda: equal_to_model(spark, table, history), 240, "the changes never arrived")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        merges = re.findall(
            rf'icefjord_writer_commits_total{{path="merge",table="{re.escape(table)}"}} (\S+)',
            metrics,
        ) or re.findall(
            rf'icefjord_writer_commits_total{{table="{re.escape(table)}",path="merge"}} (\S+)',
            metrics,
        )
        assert merges and float(merges[0]) >= 1, log.read_text(errors="replace")[-3000:]
    assert_equal_to_model(spark, table, inserts + changes)
    _ran_on_the_cluster(spark_cluster, "icefjord-iceberg-writer")


def _result(stack: Stack, topic: str, request_id: str) -> MaintenanceResult | None:
    for payload in control_events(stack, topic):
        if isinstance(payload, MaintenanceResult) and payload.request_id == request_id:
            return payload
    return None


def test_the_maintainers_compaction_runs_on_the_cluster(
    stack: Stack,
    spark: Any,
    spark_cluster: Cluster,
    namespace: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    table = f"{namespace}.small"
    spark.sql(
        f"""CREATE TABLE icefjord.{table} (id BIGINT NOT NULL, region STRING, v STRING)
        USING iceberg TBLPROPERTIES ('format-version'='2')"""
    )
    for k in range(6):
        spark.createDataFrame([(k, "eu", f"v{k}")], "id long, region string, v string").writeTo(
            f"icefjord.{table}"
        ).append()
    control = topic_factory("control", partitions=1)
    port = free_port()
    env = maintainer_env(stack, control, port, namespace, spark_cluster.master)
    env |= {
        "ICEFJORD_MAINTAINER_WARM_UP": "false",
        "ICEFJORD_MAINTAINER_SPARK__CONF": EXECUTOR_CONF,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    log = tmp_path / "maintainer.log"
    with ready_process("services.maintainer", env, log, port):
        request_id = f"cluster-{uuid.uuid4().hex[:8]}"
        request_maintenance(stack, control, table, MaintenanceAction.COMPACT_DATA_FILES, request_id)
        answers: list[MaintenanceResult] = []

        def answered() -> bool:
            found = _result(stack, control, request_id)
            answers[:] = [found] if found is not None else []
            return bool(answers)

        _wait_for(answered, 300, "no MaintenanceResult: " + log.read_text(errors="replace"))
        result = answers[0]
        assert result.status is MaintenanceStatus.SUCCEEDED, (result, log.read_text()[-3000:])
        assert result.files_before == 6 and result.files_after == 1, result
    rows = spark.sql(f"SELECT id, v FROM icefjord.{table} ORDER BY id").collect()
    assert [(r["id"], r["v"]) for r in rows] == [(k, f"v{k}") for k in range(6)]
    _ran_on_the_cluster(spark_cluster, "icefjord-maintainer")
