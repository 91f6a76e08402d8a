"""A Debezium table of customers and a driver for cdc-normalizer, for its tests and the
dead-letter replay's."""

from __future__ import annotations

import base64
import re
import time
from typing import Any

from harness import Stack

from services.cdc_normalizer.app import NormalizerService
from services.cdc_normalizer.config import NormalizerSettings
from shared.errors import RetryableError

COLUMNS: list[dict[str, Any]] = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "email"},
    {
        "type": "bytes",
        "optional": True,
        "field": "balance",
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
    },
    {"type": "int32", "optional": True, "field": "birth_date", "name": "io.debezium.time.Date"},
]


def row(customer_id: int, email: str, cents: int, days: int) -> dict[str, Any]:
    unscaled = cents.to_bytes(8, "big", signed=True).lstrip(b"\x00") or b"\x00"
    return {
        "id": customer_id,
        "email": email,
        "balance": base64.b64encode(unscaled).decode(),
        "birth_date": days,
    }


def drain(service: NormalizerService, expected: int, timeout_s: float = 60.0) -> int:
    """Step until ``expected`` records were committed (retrying like run_loop would)."""
    done = 0
    deadline = time.monotonic() + timeout_s
    while done < expected and time.monotonic() < deadline:
        try:
            done += service.step()
        except RetryableError:
            time.sleep(0.5)
    return done


def normalizer_settings(
    stack: Stack, source_topic: str, table: str, dead_letter_topic: str, **overrides: Any
) -> NormalizerSettings:
    """A normalizer of ``source_topic`` alone, with its own group, transactional id and
    dead-letter topic, short polls; ``overrides`` win."""
    values: dict[str, Any] = {
        "kafka": stack.kafka,
        "registry": stack.registry,
        "include_pattern": f"^{re.escape(source_topic)}$",
        "group_id": f"normalizer-{table}",
        "transactional_id": f"tx-{table}",
        "dead_letter_topic": dead_letter_topic,
        "topic_replication_factor": 1,
        "poll_timeout_s": 0.5,
    }
    return NormalizerSettings(**(values | overrides))
