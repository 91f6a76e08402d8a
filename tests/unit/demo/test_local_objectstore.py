"""The local S3 server refuses to start on a disk where it would only serve read-only."""

from __future__ import annotations

from pathlib import Path

import pytest

from icefjord.local.objectstore import ObjectStore, ObjectStoreError, free_mib
from icefjord.local.settings import LocalSettings

pytestmark = pytest.mark.unit


def test_free_space_is_what_the_file_system_reports(tmp_path: Path) -> None:
    import shutil

    assert abs(free_mib(tmp_path) - shutil.disk_usage(tmp_path).free // 2**20) < 64


def test_a_disk_below_the_threshold_stops_the_start_with_the_figures(tmp_path: Path) -> None:
    free = free_mib(tmp_path)
    settings = LocalSettings(state_dir=tmp_path, warehouse_store="s3", s3_min_free_mib=free + 10**6)
    store = ObjectStore(settings)
    with pytest.raises(ObjectStoreError, match=r"MiB free under .*s3_min_free_mib"):
        store.start()
    assert store.process.pid() is None
