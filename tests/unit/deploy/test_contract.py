"""The deployment contract matches the services: their metrics modules register exactly the
metrics (names, types, labels) the contract lists, and their settings use its ports/prefixes."""

from __future__ import annotations

import importlib
import inspect
from typing import Any
from unittest.mock import MagicMock

import pytest
from deploycheck.contract import Contract
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

pytestmark = pytest.mark.unit

SERVICES = ("cdc-normalizer", "schema-watcher", "iceberg-writer", "maintainer", "console")


def registered(module_name: str) -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (type, labels) of every metric the service's bundle registers.

    Labelled metrics show their label names before any sample exists; metrics made at scrape
    time by a custom collector (the maintainer's table gauges) are read from their samples,
    with one stand-in table health so that every family has one.
    """
    module = importlib.import_module(module_name)
    bundles = [
        value
        for name, value in vars(module).items()
        if isinstance(value, type)
        and name.endswith("Metrics")
        and hasattr(value, "create")
        and value.__module__ == module.__name__
    ]
    assert len(bundles) == 1, f"{module_name}: expected one *Metrics bundle, found {bundles}"
    registry = CollectorRegistry()
    extra = {}
    if "healths" in inspect.signature(bundles[0].create).parameters:
        extra["healths"] = lambda: {"inventory.orders": MagicMock()}
    bundle: Any = bundles[0].create(registry, **extra)
    found = {}
    for metric in vars(bundle).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        kind = metric._type
        name = metric._name + ("_total" if kind == "counter" else "")
        found[name] = (kind, frozenset(metric._labelnames))
    for family in registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        if name not in found:
            labels = {label for sample in family.samples for label in sample.labels}
            found[name] = (family.type, frozenset(labels - {"le"}))
    return found


def import_or_skip(module_name: str) -> None:
    try:
        importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            pytest.skip(f"{module_name} is not built yet")
        raise


@pytest.mark.parametrize("service", SERVICES)
def test_metrics_module_matches_the_contract(contract: Contract, service: str) -> None:
    svc = contract.services[service]
    import_or_skip(svc.metrics_module)
    expected = {
        m.name: (m.type, m.labels) for m in contract.metrics.values() if m.service == service
    }
    assert registered(svc.metrics_module) == expected


@pytest.mark.parametrize(
    ("service", "config_module", "settings_class"),
    [
        ("cdc-normalizer", "services.cdc_normalizer.config", "NormalizerSettings"),
        ("schema-watcher", "services.schema_watcher.config", "WatcherSettings"),
        ("iceberg-writer", "services.iceberg_writer.config", "WriterSettings"),
        ("maintainer", "services.maintainer.config", "MaintainerSettings"),
        ("console", "services.console.config", "ConsoleSettings"),
    ],
)
def test_settings_use_the_contract_port_and_prefix(
    contract: Contract, service: str, config_module: str, settings_class: str
) -> None:
    svc = contract.services[service]
    import_or_skip(config_module)
    settings = getattr(importlib.import_module(config_module), settings_class)
    assert settings.model_config["env_prefix"] == svc.env_prefix
    assert settings().metrics.port == svc.port
    if svc.group_id is not None:  # what an autoscaler on its lag watches
        assert settings().group_id == svc.group_id


def test_every_service_has_its_own_port_and_prefix(contract: Contract) -> None:
    services = list(contract.services.values())
    assert sorted(s.name for s in services) == sorted(SERVICES)
    assert len({s.port for s in services}) == len({s.env_prefix for s in services}) == 5
    assert {m.service for m in contract.metrics.values()} == set(SERVICES)
