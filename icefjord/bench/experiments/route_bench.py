"""CPU of the cdc-normalizer's per-record steps on real Debezium records, outside the service.

Reads up to --records records from each of the benchmark's Debezium topics on the running
local stack (a benchmark run leaves them there; JSON with schemas, as Kafka Connect wrote
them), then times, best of --repeat by process CPU time: routing them as the service does
(``Router.route``: the envelope, the conversions, the position and the source map) and
encoding each change's key and value (``AvroEncoder.frame``, schema ids fixed as in
``icefjord bench normalize``). Prints microseconds per record for each step.

    PYTHONPATH=.icefjord/compiled .venv/bin/python \\
        icefjord/bench/experiments/route_bench.py demo.bench_e2e

(from the checkout, after `make compiled`; without PYTHONPATH it runs plain CPython). To
compare two builds on the same records, pass --save FILE once and --load FILE after.
"""

from __future__ import annotations

import argparse
import pickle
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from icefjord.bench.normalizer import _Encoder, build_kind
from services.cdc_normalizer.pipeline import Emit, Router, SourceRecord

TABLES = ("customers", "orders", "payments")


def consume(prefix: str, limit: int) -> list[tuple[Any, ...]]:
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "route-bench"})
    out: list[tuple[Any, ...]] = []
    for table in TABLES:
        topic = f"{prefix}.{table}"
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, max(low, high - limit))])
        got = 0
        while got < limit:
            batch = consumer.consume(1000, timeout=2.0)
            if not batch:
                break
            for m in batch:
                if m.error() is None and m.value() is not None:
                    out.append(
                        (m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1])
                    )
                    got += 1
    consumer.close()
    return out


def best(repeat: int, count: int, work: Any) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        work()
        times.append(time.process_time() - started)
    return min(times) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("prefix", help="Debezium topic prefix, e.g. demo.bench_e2e")
    parser.add_argument("--records", type=int, default=20_000, help="per table")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--save")
    parser.add_argument("--load")
    args = parser.parse_args()
    if args.load:
        with open(args.load, "rb") as saved:
            raw = pickle.load(saved)
    else:
        raw = consume(args.prefix, args.records)
    if args.save:
        with open(args.save, "wb") as target:
            pickle.dump(raw, target)
    records = [SourceRecord(*fields) for fields in raw]

    def lookup(schema_id: int) -> Any:
        raise KeyError(schema_id)

    router = Router(
        lookup=lookup, clock_ms=lambda: 0, dead_letter_topic="dlq", max_record_bytes=1 << 22
    )
    routed: list[Emit] = []

    def route() -> None:
        routed.clear()
        for record in records:
            result = router.route(record)
            assert isinstance(result, Emit), result
            routed.append(result)

    encoder = _Encoder()

    def encode() -> None:
        for result in routed:
            for change in result.changes:
                encoder(change)

    print(f"{build_kind()}; {len(records):,} records")
    print(f"route:  {best(args.repeat, len(records), route):.2f} us per record")
    print(f"encode: {best(args.repeat, len(records), encode):.2f} us per record")


if __name__ == "__main__":
    main()
