"""``icefjord control pause|resume|flush`` before anything reaches Kafka: a name no table
can have is refused, and Kafka that does not answer is one line and exit code 4."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import shared.operator
from icefjord.cli import app
from shared.operator import EXIT_REJECTED, EXIT_UNREACHABLE

pytestmark = pytest.mark.unit


@pytest.fixture
def nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings that point at a port nothing listens on."""
    monkeypatch.setenv("ICEFJORD_WRITER_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:9")
    monkeypatch.setenv("ICEFJORD_WRITER_REGISTRY__URL", "http://127.0.0.1:9")
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(shared.operator, "CONNECT_TIMEOUT_S", 2.0)


@pytest.mark.parametrize("command", ["pause", "resume", "flush"])
@pytest.mark.parametrize("name", ["orders", "shop.orders.v2", "shop.*", "'*'"])
def test_a_name_no_table_can_have_is_refused_before_anything_is_published(
    nowhere: None, command: str, name: str
) -> None:
    result = CliRunner().invoke(app, ["control", command, name])
    assert result.exit_code == EXIT_REJECTED, result.output
    assert "rejected:" in result.output and "not <namespace>.<table>" in result.output
    assert "unreachable" not in result.output, "Kafka was contacted"


@pytest.mark.parametrize("wait", ["--wait", "--no-wait"])
def test_kafka_that_does_not_answer_is_one_line_and_exit_code_4(nowhere: None, wait: str) -> None:
    result = CliRunner().invoke(app, ["control", "pause", "shop.orders", wait])
    assert result.exit_code == EXIT_UNREACHABLE, result.output
    assert "Kafka at 127.0.0.1:9 does not answer" in result.output
    assert "nothing was published" in result.output
    assert "Traceback" not in result.output
