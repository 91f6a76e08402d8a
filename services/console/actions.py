"""The page's buttons: pause, resume, flush and compact, published exactly as
``icefjord control`` publishes them.

:func:`decide` is pure: it checks that actions are on, the bearer token, and the table name,
and builds the event (an ``OperatorCommand`` checked by the writer's own
``check_command_table``, or the ``MaintenanceRequest`` for COMPACT_DATA_FILES that
``icefjord control compact`` builds, checked by the maintainer's ``validate_request``).
:func:`publish` hands the event to ``shared.operator.publish_and_await``, the CLI's own
publishing, without waiting for the answer: the answer arrives on the control topic and the
page shows it.
"""

from __future__ import annotations

import enum
import hmac
from dataclasses import dataclass

from pydantic import SecretStr

from services.iceberg_writer.table_names import check_command_table
from services.maintainer.requests import Rejection, build_request, validate_request
from shared.events import (
    ALL_TABLES,
    ControlEvent,
    MaintenanceAction,
    OperatorCommand,
    OperatorCommandKind,
)
from shared.operator import ControlUnreachableError, publish_and_await
from shared.settings import KafkaSettings, RegistrySettings

__all__ = ["Action", "Refusal", "decide", "publish"]

REQUESTED_BY = "operator:console"


class Action(enum.StrEnum):
    """What a button asks for."""

    PAUSE = "pause"
    RESUME = "resume"
    FLUSH = "flush"
    COMPACT = "compact"


_COMMANDS = {
    Action.PAUSE: OperatorCommandKind.PAUSE,
    Action.RESUME: OperatorCommandKind.RESUME,
    Action.FLUSH: OperatorCommandKind.FLUSH,
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an action was not published: the HTTP status, the metric's outcome, the reason."""

    status: int
    outcome: str
    reason: str


def authorized(token: SecretStr | None, authorization: str | None) -> Refusal | None:
    """None when ``authorization`` is ``Bearer <token>``; otherwise 401 (none given) or 403
    (a wrong one). The comparison takes the same time whatever the guess."""
    if token is None:
        return Refusal(403, "unauthorized", "no token is configured for actions")
    scheme, _, given = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return Refusal(401, "unauthorized", "send the console's token: Authorization: Bearer …")
    expected = token.get_secret_value().encode()
    if not hmac.compare_digest(given.strip().encode(), expected):
        return Refusal(403, "unauthorized", "the token is not the console's")
    return None


def decide(
    action: str,
    table: str,
    *,
    enabled: bool,
    token: SecretStr | None,
    authorization: str | None,
    producer: str,
    reason: str | None = None,
) -> ControlEvent | Refusal:
    """The event to publish for ``action`` on ``table``, or why not (no side effect)."""
    if not enabled:
        return Refusal(403, "disabled", "actions are off (ICEFJORD_CONSOLE_ACTIONS=false)")
    refused = authorized(token, authorization)
    if refused is not None:
        return refused
    try:
        kind = Action(action)
    except ValueError:
        choices = ", ".join(a.value for a in Action)
        return Refusal(400, "rejected", f"unknown action {action[:40]!r}: one of {choices}")
    why = reason or f"operator request from the console ({kind.value})"
    if kind is Action.COMPACT:
        if table == ALL_TABLES:
            return Refusal(400, "rejected", "compact names one table, not '*'")
        request = build_request(
            table, MaintenanceAction.COMPACT_DATA_FILES, reason=why, user="console"
        )
        checked = validate_request(request)
        if isinstance(checked, Rejection):
            return Refusal(400, "rejected", checked.reason)
        return ControlEvent.new(table, request, producer=producer)
    try:
        check_command_table(table)
    except ValueError as exc:
        return Refusal(400, "rejected", str(exc))
    command = OperatorCommand(
        command=_COMMANDS[kind], table=table, reason=why, requested_by=REQUESTED_BY
    )
    return ControlEvent.new(table, command, producer=producer)


def publish(
    kafka: KafkaSettings, registry: RegistrySettings, topic: str, event: ControlEvent
) -> Refusal | None:
    """Publish ``event`` on ``topic`` and wait for its delivery (blocking: run it in an
    executor); a 503 refusal when Kafka, the topic or the registry does not answer."""
    try:
        publish_and_await(kafka, registry, topic, event, lambda _event: None, 0.0)
    except ControlUnreachableError as exc:
        return Refusal(503, "unreachable", f"nothing was published: {exc}")
    return None
