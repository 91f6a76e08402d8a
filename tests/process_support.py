"""A service run as users run it, ``python -m <module>``, for the tests that need a process of
its own (its own SparkSession, its own Kafka clients, SIGTERM and SIGKILL)."""

from __future__ import annotations

import os
import re
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
