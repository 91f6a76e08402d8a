"""Types and helpers the tests share (importable: tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from confluent_kafka import Consumer

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
