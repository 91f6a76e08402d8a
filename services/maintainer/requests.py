"""Validation of maintenance requests: identifier, scope and options, before any SQL exists.

:func:`validate_request` turns a :class:`MaintenanceRequest` (from an operator or from the
policies) into a :class:`ValidatedRequest` with parsed values, or a :class:`Rejection` with
the reason. Option keys are Iceberg's own names (procedure option or argument names), each
from a per-action allow-list with a typed parser; a value is re-rendered from what was
parsed, never passed through as text.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from services.maintainer.identifiers import (
    MalformedFilterError,
    MalformedIdentifierError,
    PartitionFilter,
    TableId,
    parse_filter,
    parse_table,
)
from shared.events import MaintenanceAction, MaintenanceRequest

__all__ = [
    "ALLOWED_OPTIONS",
    "OptionValue",
    "Rejection",
    "ValidatedRequest",
    "build_request",
    "render_option",
    "validate_request",
]

OptionValue: TypeAlias = int | float | bool


def _integer(minimum: int) -> Callable[[str], OptionValue]:
    def parse(text: str) -> OptionValue:
        if not text.strip().lstrip("-").isdigit() or len(text) > 19:
            raise ValueError(f"expected an integer, got {text[:40]!r}")
        value = int(text)
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _boolean(text: str) -> OptionValue:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text[:40]!r}")
    return lowered == "true"


def _ratio(text: str) -> OptionValue:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number between 0 and 1, got {text[:40]!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a number between 0 and 1, got {value}")
    return value


_POSITIVE = _integer(1)
_NON_NEGATIVE = _integer(0)

_REWRITE_COMMON: Mapping[str, Callable[[str], OptionValue]] = {
    "target-file-size-bytes": _POSITIVE,
    "min-input-files": _POSITIVE,
    "rewrite-all": _boolean,
    "partial-progress.enabled": _boolean,
    "partial-progress.max-commits": _POSITIVE,
    "partial-progress.max-failed-commits": _NON_NEGATIVE,
    "max-concurrent-file-group-rewrites": _POSITIVE,
    "max-file-group-size-bytes": _POSITIVE,
}

ALLOWED_OPTIONS: Mapping[MaintenanceAction, Mapping[str, Callable[[str], OptionValue]]] = {
    MaintenanceAction.COMPACT_DATA_FILES: {
        **_REWRITE_COMMON,
        "min-file-size-bytes": _NON_NEGATIVE,
        "max-file-size-bytes": _POSITIVE,
        "delete-file-threshold": _NON_NEGATIVE,
        "delete-ratio-threshold": _ratio,
        "remove-dangling-deletes": _boolean,
        "cache-delete-files": _boolean,
    },
    MaintenanceAction.REWRITE_POSITION_DELETES: dict(_REWRITE_COMMON),
    MaintenanceAction.EXPIRE_SNAPSHOTS: {
        "older_than_ms": _NON_NEGATIVE,
        "retain_last": _POSITIVE,
    },
    MaintenanceAction.REMOVE_ORPHAN_FILES: {
        "older_than_ms": _NON_NEGATIVE,
        "dry_run": _boolean,
    },
    MaintenanceAction.REWRITE_MANIFESTS: {},
}
"""Per action, the accepted option keys and their parsers. ``older_than_ms`` is an age
threshold as an absolute Unix time in ms (Iceberg's ``older_than`` argument)."""

SCOPED_ACTIONS = frozenset(
    {MaintenanceAction.COMPACT_DATA_FILES, MaintenanceAction.REWRITE_POSITION_DELETES}
)


def render_option(value: OptionValue) -> str:
    """The text Iceberg expects for a parsed option value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class ValidatedRequest:
    """A request whose table, scope and options all parsed."""

    request: MaintenanceRequest
    table: TableId
    scope: PartitionFilter | None
    options: Mapping[str, OptionValue]


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a request was refused; becomes a REJECTED ``MaintenanceResult``."""

    request: MaintenanceRequest
    reason: str


def validate_request(request: MaintenanceRequest) -> ValidatedRequest | Rejection:
    """Check ``request`` without touching the catalog (whether the table exists, and whether
    the filter's columns are in it, is checked at execution).

    Rejects: a malformed table identifier; a partition scope on an action that has none, or
    one outside :func:`~services.maintainer.identifiers.parse_filter`'s grammar; an option key
    not allowed for the action; an option value that does not parse.
    """
    try:
        table = parse_table(request.table)
    except MalformedIdentifierError as exc:
        return Rejection(request, str(exc))
    scope: PartitionFilter | None = None
    if request.partition is not None and request.partition.strip():
        if request.action not in SCOPED_ACTIONS:
            return Rejection(request, f"{request.action.value} takes no partition scope")
        try:
            scope = parse_filter(request.partition)
        except MalformedFilterError as exc:
            return Rejection(request, f"bad partition filter: {exc}")
    allowed = ALLOWED_OPTIONS[request.action]
    options: dict[str, OptionValue] = {}
    for key in sorted(request.options):
        parser = allowed.get(key)
        if parser is None:
            accepted = ", ".join(sorted(allowed)) or "none"
            return Rejection(
                request,
                f"bad option {key[:100]!r} for {request.action.value} (accepted: {accepted})",
            )
        try:
            options[key] = parser(request.options[key])
        except ValueError as exc:
            return Rejection(request, f"bad option {key}: {exc}")
    return ValidatedRequest(request, table, scope, options)


def build_request(
    table: str,
    action: MaintenanceAction,
    *,
    partition: str | None = None,
    options: Sequence[str] = (),
    reason: str | None = None,
    user: str = "unknown",
) -> MaintenanceRequest:
    """An operator request; ``options`` are ``KEY=VALUE`` strings (ValueError otherwise)."""
    parsed: dict[str, str] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"option {option!r} is not KEY=VALUE")
        parsed[key.strip()] = value.strip()
    return MaintenanceRequest(
        request_id=str(uuid.uuid4()),
        table=table,
        action=action,
        partition=partition,
        options=parsed,
        reason=reason or f"operator request from the command line ({action.value})",
        requested_by=f"operator:{user}",
    )
