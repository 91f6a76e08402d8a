"""Types and helpers the tests share (importable: tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from icefjord.local.connect import KafkaConnect
from icefjord.local.postgres import PostgresCluster, PostgresNotInstalled, find_bin_dir
from icefjord.local.services import service_processes
from icefjord.local.settings import LocalSettings
from icefjord.local.stack import LocalStack
from shared.kafka import GroupMembership
from shared.settings import CatalogSettings, KafkaSettings, RegistrySettings


@dataclass(frozen=True)
class Stack:
    """Addresses of the stack under test; ``local`` is set when this session started it."""

    kafka: KafkaSettings
    registry: RegistrySettings
    catalog: CatalogSettings
    local: LocalStack | None


_HANDED_OUT: set[int] = set()
_PORT_SPAN = 12_000  # how far below the ephemeral range ports are drawn from


def ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port nothing listens on, below the kernel's ephemeral range, never handed out
    before in this session.

    Binding to port 0 gives a port from the ephemeral range, and any outgoing connection
    (a Kafka client's, Spark's) may take that port as its own before the test's process
    binds it: the restarted writer of the fault test failed with "Address already in use"
    that way. The kernel never gives a port below the range to a connection."""
    high = ephemeral_low()
    low = max(1024, high - _PORT_SPAN)
    for _ in range(500):
        port = random.randrange(low, high)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port in {low}-{high - 1}")


@contextlib.contextmanager
def own_pipeline(stack: Stack, why: str, needs_postgres: bool = False) -> Iterator[LocalSettings]:
    """The session's local stack with a PostgreSQL cluster directory of its own and free
    ports for PostgreSQL, Kafka Connect and the four services, for a test that runs the
    demo's machinery; afterwards whatever ran on them is stopped and the directory removed.
    Skips with ``why`` when the session did not start the stack itself, and when
    ``needs_postgres`` and PostgreSQL is not installed."""
    if needs_postgres:
        try:
            find_bin_dir(None)
        except PostgresNotInstalled as exc:
            pytest.skip(str(exc))
    if stack.local is None:
        pytest.skip(why)
    # Under /tmp, open to others: started by root, PostgreSQL runs as `postgres` and must
    # reach its directory (pytest's own tmp dirs are 0700).
    home = Path(tempfile.mkdtemp(prefix="icefjord-pg-"))
    home.chmod(0o755)
    update: dict[str, object] = {
        "connect_port": free_port(),
        "normalizer_port": free_port(),
        "watcher_port": free_port(),
        "writer_port": free_port(),
        "maintainer_port": free_port(),
        "trino_port": free_port(),
    }
    # A stack whose catalog is in PostgreSQL shares that cluster with its demo, as `make
    # demo` does; it stays up for the session's other tests.
    own_postgres = stack.local.settings.catalog_store != "postgres"
    if own_postgres:
        update |= {"postgres_port": free_port(), "postgres_dir": home / "pg"}
    settings = stack.local.settings.model_copy(update=update)
    try:
        yield settings
    finally:
        for service in service_processes(settings):
            service.stop()
        KafkaConnect(settings, None).stop()
        if own_postgres:
            PostgresCluster(settings).stop()
        shutil.rmtree(home, ignore_errors=True)


class LostOnce(GroupMembership):
    """Reports a consumer out of its group once, once armed and after it has joined:
    librdkafka's stuck rejoin cannot be caused on purpose, a service's answer to it can be
    checked."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.fired = False

    def lost(self, consumer: Consumer) -> bool:
        if self.armed and not self.fired and consumer.memberid():
            self.fired = True
            return True
        return super().lost(consumer)


def stack_secrets(settings: LocalSettings) -> list[str]:
    """Every password of the stack, as it would appear on a command line."""
    secrets = settings.security_files.secrets()
    return [
        secret.get_secret_value()
        for secret in (secrets.store_password, secrets.kafka_password, secrets.registry_password)
    ]


def command_lines_with(needles: list[str]) -> list[str]:
    """The command lines of this machine's processes that contain one of ``needles``."""
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            arguments = path.read_bytes().decode(errors="replace").replace("\0", " ")
        except OSError:
            continue  # exited while listed
        if any(needle in arguments for needle in needles):
            found.append(f"{path.parent.name}: {arguments[:300]}")
    return found
