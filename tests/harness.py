"""Types and helpers the tests share (importable: tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from icefjord.local.stack import LocalStack
from shared.settings import CatalogSettings, KafkaSettings, RegistrySettings


@dataclass(frozen=True)
class Stack:
    """Addresses of the stack under test; ``local`` is set when this session started it."""

    kafka: KafkaSettings
    registry: RegistrySettings
    catalog: CatalogSettings
    local: LocalStack | None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
