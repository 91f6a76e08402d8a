"""JSON-friendly rendering of normalized changes (for the CLI and for humans).

Decimals become strings (exact), dates/times/timestamps ISO-8601 (UTC instants end in ``Z``),
bytes base64; everything else is JSON already.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Mapping
from typing import Any

from services.cdc_normalizer.normalize import Change

__all__ = ["change_to_json", "json_value"]


def json_value(value: Any) -> Any:
    """``value`` (an Avro-ready Python value) as a JSON-serializable value."""
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return value.isoformat()
        return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat() + "Z"
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    return value


def change_to_json(change: Change) -> dict[str, Any]:
    """A change as a JSON object: table, op, position, source_ts_ms, tx_id, source, key, after."""
    return {
        "table": str(change.table),
        "op": change.op.value,
        "position": change.position,
        "source_ts_ms": change.source_ts_ms,
        "tx_id": change.tx_id,
        "source": dict(change.source),
        "key": json_value(change.key),
        "after": None if change.after is None else json_value(change.after),
    }
