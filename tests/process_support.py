"""A service run as users run it, ``python -m <module>``, for the tests that need a process of
its own (its own SparkSession, its own Kafka clients, SIGTERM and SIGKILL)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import Stack

from shared.avro import AvroCodec
from shared.control import ControlPublisher
from shared.events import ControlEvent, MaintenanceAction, MaintenanceRequest
from shared.kafka import make_producer
from shared.registry import make_registry_client


def maintainer_env(
    stack: Stack, control_topic: str, port: int, namespace: str, master: str
) -> dict[str, str]:
    """The maintainer's settings for one test: its control topic, metrics port, a group of its
    own, the tables of ``namespace``, Spark at ``master``."""
    return {
        "ICEFJORD_MAINTAINER_KAFKA__BOOTSTRAP_SERVERS": stack.kafka.bootstrap_servers,
        "ICEFJORD_MAINTAINER_REGISTRY__URL": stack.registry.url,
        "ICEFJORD_MAINTAINER_CONTROL_TOPIC": control_topic,
        "ICEFJORD_MAINTAINER_CATALOG": stack.catalog.model_dump_json(),
        "ICEFJORD_MAINTAINER_METRICS__HOST": "127.0.0.1",
        "ICEFJORD_MAINTAINER_METRICS__PORT": str(port),
        "ICEFJORD_MAINTAINER_GROUP_ID": f"maintainer-{uuid.uuid4().hex[:8]}",
        "ICEFJORD_MAINTAINER_INCLUDE": rf"{re.escape(namespace)}\..+",
        "ICEFJORD_MAINTAINER_SPARK__MASTER": master,
        "ICEFJORD_MAINTAINER_LOG_FORMAT": "console",
    }


def request_maintenance(
    stack: Stack, control_topic: str, table: str, action: MaintenanceAction, request_id: str
) -> None:
    """Publish an operator's MaintenanceRequest for ``table`` on ``control_topic``."""
    publisher = ControlPublisher(
        make_producer(stack.kafka), AvroCodec(make_registry_client(stack.registry)), control_topic
    )
    request = MaintenanceRequest(
        request_id=request_id,
        table=table,
        action=action,
        reason="integration test",
        requested_by="operator:test",
    )
    publisher.publish(ControlEvent.new(table, request, producer="test"))
    publisher.flush()


@contextmanager
def ready_process(
    module: str, env: dict[str, str], log: Path, port: int, timeout_s: float = 240
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m <module>`` with ``env`` over this process's environment, handed out once
    its ``/readyz`` answers 200; stopped with SIGTERM (then SIGKILL) after."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", module],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            assert process.poll() is None, log.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, f"{module} never ready"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(1)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def writer_env(stack: Stack, topic: str, group: str, port: int, **extra: str) -> dict[str, str]:
    """The iceberg-writer's settings for one test: the change topic ``topic``, the consumer
    group ``group`` (its control, dead-letter and quarantine topics named after it), metrics
    on ``port``; ``extra`` adds ``ICEFJORD_WRITER_<NAME>`` settings."""
    return {
        "ICEFJORD_WRITER_KAFKA__BOOTSTRAP_SERVERS": stack.kafka.bootstrap_servers,
        "ICEFJORD_WRITER_REGISTRY__URL": stack.registry.url,
        "ICEFJORD_WRITER_CATALOG": stack.catalog.model_dump_json(),
        "ICEFJORD_WRITER_TOPIC_PATTERN": f"^{re.escape(topic)}$",
        "ICEFJORD_WRITER_GROUP_ID": group,
        "ICEFJORD_WRITER_CONTROL_TOPIC": f"control-{group}",
        "ICEFJORD_WRITER_DEAD_LETTER_TOPIC": f"dlq-{group}",
        "ICEFJORD_WRITER_QUARANTINE_TOPIC": f"quarantine-{group}",
        "ICEFJORD_WRITER_TOPIC_REPLICATION_FACTOR": "1",
        "ICEFJORD_WRITER_METRICS__HOST": "127.0.0.1",
        "ICEFJORD_WRITER_METRICS__PORT": str(port),
        "ICEFJORD_WRITER_LOG_FORMAT": "console",
        **{f"ICEFJORD_WRITER_{name.upper()}": value for name, value in extra.items()},
    }


class ServiceProcess:
    """One instance of a service, ``python -m <module>``, that a test starts, kills with
    SIGKILL and starts again; each start logs to a file of its own in ``logs``."""

    def __init__(self, module: str, name: str, env: dict[str, str], port: int, logs: Path):
        self.module = module
        self.name = name
        self.env = env
        self.port = port
        self.logs = logs
        self.starts = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.logs / f"{self.name}-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module],
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ready(self) -> bool:
        assert self.running(), self.tail()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def freeze(self) -> None:
        """SIGSTOP: the process stops answering anyone, its group coordinator included."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
