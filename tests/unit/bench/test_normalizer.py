"""The benchmark routes every generated message and its outputs decode back."""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import pytest

from icefjord.bench.normalizer import bench, generate_messages
from shared.avro import decode, parse, split_header

pytestmark = pytest.mark.unit

OPS = {"c": "CREATE", "u": "UPDATE", "d": "DELETE"}


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_every_message_becomes_one_decodable_change(fmt: str) -> None:
    count = 200
    result = bench(count, fmt, keep_outputs=True)  # type: ignore[arg-type]
    assert (result.format, result.records, result.changes) == (fmt, count, count)
    assert len(result.outputs) == count
    assert result.seconds > 0 and result.changes_per_second > 0
    schemas = {schema_id: parse(text) for schema_id, text in result.schemas}
    # The same events as JSON give the expected values independently of the Avro path.
    sources = [json.loads(m.value or b"")["payload"] for m in generate_messages(count, "json")]
    seen_ops = set()
    for (key_bytes, value_bytes), source in zip(result.outputs, sources, strict=True):
        assert key_bytes is not None
        key = decode(key_bytes, schemas[split_header(key_bytes)[0]])
        value = decode(value_bytes, schemas[split_header(value_bytes)[0]])
        image = source["after"] or source["before"]
        assert key == {"id": image["id"]}
        assert value["key"] == key
        assert value["op"] == OPS[source["op"]]
        seen_ops.add(source["op"])
        if source["after"] is None:
            assert value["after"] is None
            continue
        after = value["after"]
        if isinstance(after, tuple):  # decode returns (record name, datum) for a union
            after = after[1]
        unscaled = int.from_bytes(base64.b64decode(source["after"]["amount"]), "big", signed=True)
        assert after["amount"] == Decimal(unscaled).scaleb(-2)
        assert after["status"] == source["after"]["status"]
        assert after["note"] == source["after"]["note"]
        assert after["ship_date"].toordinal() - 719163 == source["after"]["ship_date"]
    assert seen_ops == set(OPS)


def test_avro_input_is_confluent_wire_format() -> None:
    for message in generate_messages(20, "avro"):
        assert message.key is not None and message.value is not None
        assert split_header(message.key)[0] == 1 and split_header(message.value)[0] == 2


def test_schema_cache_returns_the_parsed_schema_and_never_caches_failures() -> None:
    from services.cdc_normalizer.connect_schema import connect_schema_from_json
    from services.cdc_normalizer.envelope import _cached_schema
    from services.cdc_normalizer.errors import InvalidSchema

    block = json.loads(generate_messages(1, "json")[0].value or b"")["schema"]
    assert _cached_schema(block, "value.schema") == connect_schema_from_json(block, "x")
    assert _cached_schema(block, "value.schema") is _cached_schema(dict(block), "value.schema")
    for _ in range(2):
        with pytest.raises(InvalidSchema):
            _cached_schema({"type": "nope"}, "value.schema")
