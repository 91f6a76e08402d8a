"""What a call gave, as a comparable value: the result, or the exception's class and message."""

from __future__ import annotations

from typing import Any


def outcome(function: Any, *args: Any) -> tuple[str, Any]:
    """``("ok", result)`` or ``("raised", (exception class, message))``."""
    try:
        return ("ok", function(*args))
    except Exception as exc:  # compared by class and message
        return ("raised", (type(exc), str(exc)))
