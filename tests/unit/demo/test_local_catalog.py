"""The local catalog component: healthy only while its properties file matches the settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icefjord.local.components import IcebergCatalog
from icefjord.local.settings import LocalSettings

pytestmark = pytest.mark.unit


def test_a_catalog_started_for_another_store_is_started_again(tmp_path: Path) -> None:
    on_disk = LocalSettings(state_dir=tmp_path)
    catalog = IcebergCatalog(on_disk, None)
    assert catalog.check().detail == "not created"
    catalog.start()
    assert catalog.check().healthy
    assert (on_disk.catalog_file.stat().st_mode & 0o777) == 0o600

    on_s3 = on_disk.model_copy(update={"warehouse_store": "s3"})
    switched = IcebergCatalog(on_s3, None)
    health = switched.check()
    assert not health.healthy and health.detail == "started with other settings"
    switched.start()
    assert switched.check().healthy
    written = json.loads(on_s3.catalog_file.read_text())
    assert written["warehouse"] == "s3://icefjord/warehouse"
    assert not catalog.check().healthy  # and back: the disk settings see the s3 file
