"""The writer's control view waits out a broker that does not answer (a restart)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from commands_support import operator_commands
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry

from services.iceberg_writer.control_view import ControlView
from services.iceberg_writer.metrics import WriterMetrics
from shared.errors import RetryableError

pytestmark = pytest.mark.unit


class SilentBroker:
    """A control consumer whose broker does not answer, as while it restarts."""

    def list_topics(self, topic: str, timeout: float) -> object:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get metadata"))


def test_a_replay_without_an_answer_from_kafka_is_retried_not_fatal() -> None:
    metrics = WriterMetrics.create(CollectorRegistry())
    commands, _ = operator_commands({}, metrics=metrics)
    reader = SimpleNamespace(topic="control")
    view = ControlView(SilentBroker(), reader, None, "control", {}, metrics, commands)  # type: ignore[arg-type]
    with pytest.raises(RetryableError, match="control topic unavailable"):
        view.replay(timeout_s=5)
