"""The console's actions: off by default, behind a bearer token, the CLI's own events."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from services.console.actions import Refusal, decide
from services.console.config import ConsoleSettings
from shared.events import (
    MaintenanceAction,
    MaintenanceRequest,
    OperatorCommand,
    OperatorCommandKind,
)

TOKEN = SecretStr("s3cret-token")


def act(action: str, table: str = "shop.orders", **overrides: object) -> object:
    options: dict[str, object] = {
        "enabled": True,
        "token": TOKEN,
        "authorization": "Bearer s3cret-token",
        "producer": "icefjord-console",
    }
    options.update(overrides)
    return decide(action, table, **options)  # type: ignore[arg-type]  # test's overrides


def test_actions_are_off_unless_enabled_and_need_the_token() -> None:
    assert act("pause", enabled=False) == Refusal(
        403, "disabled", "actions are off (ICEFJORD_CONSOLE_ACTIONS=false)"
    )
    missing = act("pause", authorization=None)
    assert isinstance(missing, Refusal) and missing.status == 401
    wrong = act("pause", authorization="Bearer guess")
    assert isinstance(wrong, Refusal) and wrong.status == 403
    basic = act("pause", authorization="Basic s3cret-token")
    assert isinstance(basic, Refusal) and basic.status == 401


@pytest.mark.parametrize(
    ("action", "kind"),
    [
        ("pause", OperatorCommandKind.PAUSE),
        ("resume", OperatorCommandKind.RESUME),
        ("flush", OperatorCommandKind.FLUSH),
    ],
)
def test_pause_resume_and_flush_are_operator_commands(
    action: str, kind: OperatorCommandKind
) -> None:
    event = act(action)
    assert not isinstance(event, Refusal)
    payload = event.payload  # type: ignore[attr-defined]  # narrowed above
    assert isinstance(payload, OperatorCommand)
    assert (payload.command, payload.table, event.table) == (kind, "shop.orders", "shop.orders")  # type: ignore[attr-defined]


def test_compact_is_the_cli_compact_request() -> None:
    event = act("compact")
    assert not isinstance(event, Refusal)
    payload = event.payload  # type: ignore[attr-defined]  # narrowed above
    assert isinstance(payload, MaintenanceRequest)
    assert payload.action is MaintenanceAction.COMPACT_DATA_FILES
    assert payload.requested_by == "operator:console"


@pytest.mark.parametrize("table", ["", "orders", "a.b.c", "x.y;drop", "../etc"])
def test_a_bad_table_name_is_refused_with_a_reason(table: str) -> None:
    for action in ("pause", "compact"):
        refused = act(action, table)
        assert isinstance(refused, Refusal) and refused.status == 400 and refused.reason


def test_an_unknown_action_is_refused() -> None:
    refused = act("drop")
    assert isinstance(refused, Refusal) and refused.status == 400


def test_actions_on_without_a_token_are_invalid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEFJORD_CONSOLE_ACTIONS", "true")
    with pytest.raises(ValidationError, match="no token"):
        ConsoleSettings()
    monkeypatch.setenv("ICEFJORD_CONSOLE_TOKEN", "t")
    assert ConsoleSettings().actions
    monkeypatch.delenv("ICEFJORD_CONSOLE_ACTIONS")
    assert not ConsoleSettings().actions, "read-only by default"


def test_kafka_down_is_a_503_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import services.console.actions as actions
    from shared.operator import ControlUnreachableError
    from shared.settings import KafkaSettings, RegistrySettings

    def unreachable(*_args: object) -> None:
        raise ControlUnreachableError("Kafka at 127.0.0.1:1 does not answer")

    monkeypatch.setattr(actions, "publish_and_await", unreachable)
    event = act("pause")
    assert not isinstance(event, Refusal)
    refused = actions.publish(KafkaSettings(), RegistrySettings(), "icefjord.control", event)  # type: ignore[arg-type]  # narrowed above
    assert refused is not None and refused.status == 503
    assert "nothing was published" in refused.reason
