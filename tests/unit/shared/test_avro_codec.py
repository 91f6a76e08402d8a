"""shared.avro.AvroCodec: a schema is registered once per subject, whichever way it is given."""

from __future__ import annotations

from typing import Any

import pytest

from shared.avro import AvroCodec

pytestmark = pytest.mark.unit

SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}


class CountingRegistry:
    def __init__(self) -> None:
        self.registered: list[tuple[str, str]] = []

    def register_schema(self, subject: str, schema: Any) -> int:
        self.registered.append((subject, schema.schema_str))
        return 7


def test_the_same_schema_object_is_registered_once_and_encodes_alike() -> None:
    registry = CountingRegistry()
    codec = AvroCodec(registry)  # type: ignore[arg-type]
    first = codec.serialize("s-value", SCHEMA, {"n": 1})
    again = codec.serialize("s-value", SCHEMA, {"n": 1})
    copy = codec.serialize("s-value", dict(SCHEMA), {"n": 1})
    assert first == again == copy
    assert len(registry.registered) == 1
    assert codec.deserialize(first) == (7, {"n": 1})


def test_a_new_dict_each_time_is_matched_by_its_text_and_the_cache_stays_bounded() -> None:
    registry = CountingRegistry()
    codec = AvroCodec(registry)  # type: ignore[arg-type]
    schemas = [dict(SCHEMA) for _ in range(3000)]  # kept alive: no id is reused
    for schema in schemas:
        codec.register("s-value", schema)
    assert len(registry.registered) == 1
    assert len(codec._ids_by_object) <= 1024
    codec.register("other-value", SCHEMA)
    assert [subject for subject, _ in registry.registered] == ["s-value", "other-value"]
