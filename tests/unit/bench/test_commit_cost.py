"""The commit-cost benchmark's generated rows: the bench table's columns, nothing deleted."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from icefjord.bench.commit_cost import _rows
from services.iceberg_writer.types import STAGING_FLAG

pytestmark = pytest.mark.unit


def test_generated_rows_carry_their_keys_and_no_delete() -> None:
    now = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)
    frame = _rows(range(65_534, 65_538), "v3", now)
    assert frame.column("id").to_pylist() == [65_534, 65_535, 65_536, 65_537]
    assert frame.column("name").to_pylist()[0] == "v3-65534"
    assert frame.column("amount").type == pa.decimal128(14, 2)
    assert frame.column("amount").to_pylist()[2] == Decimal("0.00")  # 65,536 & 0xFFFF
    assert set(frame.column("updated_at").to_pylist()) == {now}
    assert frame.column(STAGING_FLAG).to_pylist() == [False] * 4
