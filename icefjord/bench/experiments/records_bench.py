"""CPU of the iceberg-writer's per-record steps on real change records, outside the service.

Reads up to --records change records of one table from its changes topic on the running
local stack (a benchmark run leaves them there), then times, best of --repeat by process
CPU time: decoding them as the writer does (the compiled Avro decoder where the build is on
PYTHONPATH, then ``records.change_of``), and building the commit's Arrow batch
(``apply.arrow_batch``, for the changes ``plan_batch`` keeps). Prints microseconds per
change for each step.

    PYTHONPATH=.icefjord/compiled .venv/bin/python \
        icefjord/bench/experiments/records_bench.py bench_e2e.orders

(from the checkout, after `make compiled`; without PYTHONPATH it runs plain CPython).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from services.iceberg_writer.apply import arrow_batch
from services.iceberg_writer.changes import Change, plan_batch
from services.iceberg_writer.records import change_of
from services.iceberg_writer.types import MetadataColumns, row_converters, row_record
from services.iceberg_writer.writer import DECODED
from shared.avro import split_header
from shared.avro_decoder import AvroDecoder
from shared.catalog import open_catalog
from shared.registry import make_registry_client
from shared.settings import CatalogSettings, RegistrySettings


def consume(topic: str, limit: int) -> list[Any]:
    consumer = Consumer(
        {"bootstrap.servers": "127.0.0.1:9092", "group.id": f"records-bench-{uuid.uuid4()}"}
    )
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = [TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions]
    consumer.assign(partitions)
    messages: list[Any] = []
    idle = 0
    while len(messages) < limit and idle < 5:
        batch = consumer.consume(10_000, timeout=1.0)
        idle = 0 if batch else idle + 1
        messages.extend(m for m in batch if m.error() is None and m.value() is not None)
    consumer.close()
    return messages[:limit]


def best(repeat: int, work: Any) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        work()
        times.append(time.process_time() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("table")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    registry = make_registry_client(RegistrySettings())
    table = open_catalog(CatalogSettings()).load_table(args.table)
    messages = consume(f"icefjord.changes.{args.table}", args.records)
    schema_id, _ = split_header(messages[-1].value())
    raw = json.loads(registry.get_schema(schema_id).schema_str)
    parsed = __import__("fastavro").parse_schema(raw)
    unused = [str(f["name"]) for f in raw["fields"] if f["name"] not in DECODED]
    decoder = AvroDecoder(raw, parsed, unused, uuid_text=True)
    converters = row_converters(row_record(raw))
    identifiers = table.schema().identifier_field_names()
    keys = tuple(f.name for f in table.schema().fields if f.name in identifiers)
    bodies = [(split_header(m.value())[1], m.partition(), m.offset()) for m in messages]
    changes: list[Change] = []

    def decode() -> None:
        changes.clear()
        for body, partition, offset in bodies:
            record = decoder.decode(body)
            changes.append(
                change_of(record, args.table, keys, converters, "t", partition, offset, schema_id)
            )

    decode_s = best(args.repeat, decode)
    plan = plan_batch(args.table, changes)
    kept = len(plan.upserts) + len(plan.deletes)
    batch_s = best(
        args.repeat, lambda: arrow_batch(plan, table, keys, converters, MetadataColumns())
    )
    print(
        f"{args.table}: {len(changes):,} records, {kept:,} kept; "
        f"decode {decode_s / len(changes) * 1e6:.2f} us per record, "
        f"arrow batch {batch_s / kept * 1e6:.2f} us per kept change"
    )


if __name__ == "__main__":
    main()
