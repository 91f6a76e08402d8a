"""Kafka's JsonConverter names Connect FLOAT32/FLOAT64 "float"/"double" in schema blocks."""

from __future__ import annotations

import pytest

from services.cdc_normalizer.connect_schema import (
    ConnectKind,
    InvalidSchema,
    connect_schema_from_json,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("float", ConnectKind.FLOAT32),
        ("double", ConnectKind.FLOAT64),
        ("float32", ConnectKind.FLOAT32),
        ("float64", ConnectKind.FLOAT64),
    ],
)
def test_json_converter_float_names_are_read(name: str, kind: ConnectKind) -> None:
    assert connect_schema_from_json({"type": name, "optional": True}).kind is kind


def test_an_unknown_type_is_still_rejected() -> None:
    with pytest.raises(InvalidSchema, match="unknown Connect type"):
        connect_schema_from_json({"type": "real"})
