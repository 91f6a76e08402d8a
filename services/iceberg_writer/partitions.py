"""A batch split by its table's partition spec, for the files the writer writes itself.

Each row's partition comes from pyiceberg's own transforms over Arrow columns (identity,
bucket, truncate, year, month, day, hour; pyiceberg-core computes bucket and the time
transforms as Iceberg specifies them), and each group of rows becomes one file carrying
its partition's values, given to Iceberg's Java API as partition strings
(``Conversions.fromPartitionString``), so the two sides cannot read a value differently.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    DateType,
    FixedType,
    IcebergType,
    StructType,
    UUIDType,
)

__all__ = ["Partition", "PartitionLayout", "supported_spec"]

_EPOCH = dt.date(1970, 1, 1)
_UNSUPPORTED = (BinaryType, FixedType, UUIDType, StructType)

Partition = tuple[str | None, ...]
"""A partition's values as Iceberg's partition strings (None for null); () unpartitioned."""


def supported_spec(spec: PartitionSpec, schema: Schema) -> bool:
    """Whether the writer can compute and record every partition value of ``spec``."""
    for field in spec.fields:
        source = schema.find_field(field.source_id).field_type
        if isinstance(field.transform.result_type(source), _UNSUPPORTED):
            return False
        if isinstance(source, _UNSUPPORTED):
            return False
    return True


def partition_string(value: Any, kind: IcebergType) -> str | None:
    """``value`` (a transform's result, as Arrow gives it) as the partition string Iceberg's
    ``Conversions.fromPartitionString`` reads back for a partition field of type ``kind``."""
    if value is None:
        return None
    if isinstance(kind, DateType):
        day = value if isinstance(value, dt.date) else _EPOCH + dt.timedelta(days=int(value))
        return day.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, int | float | str):
        return str(value)
    raise ValueError(f"no partition string for {value!r} ({kind})")


@dataclass(frozen=True)
class PartitionLayout:
    """One table's partition spec, as the writer applies it to a batch."""

    spec: PartitionSpec
    schema: Schema

    @classmethod
    def of(cls, spec_json: str, schema: Schema) -> PartitionLayout:
        """The layout of a spec given as Iceberg's JSON. Raises ValueError for a spec the
        writer cannot compute (a partition on a binary, fixed, UUID or struct value)."""
        spec = PartitionSpec.model_validate_json(spec_json)
        if not supported_spec(spec, schema):
            raise ValueError(f"partition spec {spec} has values the writer cannot compute")
        return cls(spec, schema)

    @property
    def unpartitioned(self) -> bool:
        return self.spec.is_unpartitioned()

    def split(self, frame: pa.Table) -> Iterator[tuple[Partition, pa.Table]]:
        """``frame``'s rows grouped by partition (each group in the frame's order); one
        group with ``()`` for an unpartitioned table. ``frame`` holds every partition
        source column under its schema name."""
        if self.unpartitioned or frame.num_rows == 0:
            yield (), frame
            return
        columns: list[pa.Array | pa.ChunkedArray] = []
        kinds: list[IcebergType] = []
        for field in self.spec.fields:
            source = self.schema.find_field(field.source_id)
            name = self.schema.find_column_name(field.source_id)
            transform = field.transform.pyarrow_transform(source.field_type)
            columns.append(transform(frame.column(name)))
            kinds.append(field.transform.result_type(source.field_type))
        names = [f"p{i}" for i in range(len(columns))]
        values = pa.Table.from_arrays(columns, names=names)
        groups = values.group_by(names).aggregate([]).to_pylist()
        for row in groups:
            partition = tuple(
                partition_string(row[n], k) for n, k in zip(names, kinds, strict=True)
            )
            if len(groups) == 1:
                yield partition, frame
                return
            masks = [
                pc.is_null(values.column(n))
                if row[n] is None
                else pc.equal(values.column(n), row[n])
                for n in names
            ]
            yield partition, frame.filter(functools.reduce(operator.and_, masks))


def java_partition(iceberg: Any, spec: Any, partition: Partition) -> Any:
    """Iceberg's ``PartitionData`` of ``partition`` for the Java ``spec``."""
    kind = spec.partitionType()
    data = iceberg.PartitionData(kind)
    fields = kind.fields()
    for i, value in enumerate(partition):
        data.set(i, iceberg.types.Conversions.fromPartitionString(fields.get(i).type(), value))
    return data
