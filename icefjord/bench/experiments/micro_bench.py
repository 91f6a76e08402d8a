"""Per-call timings behind the 2026-11-28 normalizer and writer changes (HISTORY.md).

Run from the repository root against the compiled build, and again against a build of
the commit before, to compare:

    PYTHONPATH=.icefjord/compiled .venv/bin/python \\
        icefjord/bench/experiments/micro_bench.py

Prints microseconds per call, best of 7 rounds:

- encoding a record with one ``decimal(14, 4)`` (the normalizer's Avro encoder);
- converting Connect's base64 unscaled bytes to that ``Decimal``;
- a dict lookup with a freshly built ``TableId`` (what the plan and topic caches do per
  record), and building one alone;
- one histogram observation, one by one and through ``observe_many`` (2,000 per batch).
"""

from __future__ import annotations

import json
import timeit
from collections.abc import Callable
from decimal import Decimal

from prometheus_client import CollectorRegistry, Histogram

from services.cdc_normalizer import converters
from services.cdc_normalizer.avro_encoder import AvroEncoder
from services.cdc_normalizer.connect_schema import connect_schema_from_json
from services.cdc_normalizer.table_schema import TableId

ROUNDS = 7


def best(call: Callable[[], object], number: int, per: int = 1) -> float:
    return min(timeit.repeat(call, number=number, repeat=ROUNDS)) / number / per * 1e6


def main() -> None:
    print(f"normalizer modules from {converters.__file__}")
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {
                "name": "a",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 14, "scale": 4},
            }
        ],
    }
    encoder = AvroEncoder(json.dumps(schema))
    datum = {"a": Decimal("123456.7890")}
    print(f"encode a decimal(14, 4) record: {best(lambda: encoder.encode(datum), 300_000):.2f} us")

    column = connect_schema_from_json(
        {
            "type": "bytes",
            "optional": False,
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {"scale": "4", "connect.decimal.precision": "14"},
            "field": "a",
        }
    )
    convert = converters.compile_converter(column)
    assert convert("ElZXTYI=", "a") == Decimal("7875797.3378")
    print(f"convert base64 to Decimal: {best(lambda: convert('ElZXTYI=', 'a'), 300_000):.2f} us")

    plans = {TableId("public", "orders"): 1}
    lookup = best(lambda: plans.get(TableId("public", "orders")), 500_000)
    build = best(lambda: TableId("public", "orders"), 500_000)
    print(f"dict lookup with a new TableId: {lookup:.2f} us (building it: {build:.2f} us)")

    values = [0.001 * i for i in range(2_000)]
    one = Histogram("one", "one", registry=CollectorRegistry())
    many = Histogram("many", "many", registry=CollectorRegistry())

    def each() -> None:
        for value in values:
            one.observe(value)

    print(f"histogram, one by one: {best(each, 50, len(values)):.3f} us per value")
    try:
        from shared.histograms import observe_many
    except ImportError:  # a build from before it
        print("histogram, observe_many: not in this build")
        return
    bulk = best(lambda: observe_many(many, values), 50, len(values))
    print(f"histogram, observe_many: {bulk:.3f} us per value")


if __name__ == "__main__":
    main()
