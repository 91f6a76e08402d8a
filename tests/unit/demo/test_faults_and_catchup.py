"""Fault plans, the fault injector with fakes, and the caught-up rule."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icefjord.demo.catchup import behind, caught_up, watermark_of
from icefjord.demo.faults import Fault, FaultInjector, plan_faults
from icefjord.local.components import Health

pytestmark = pytest.mark.unit

SERVICES = ["normalizer", "watcher", "writer", "maintainer"]


@given(st.integers(0, 10_000), st.floats(10, 600), st.integers(1, 4))
def test_every_service_is_killed_n_times_and_kafka_restarts_once(
    seed: int, duration: float, kills: int
) -> None:
    faults = plan_faults(duration, SERVICES, seed=seed, kills_per_service=kills)
    counts = Counter((f.kind, f.target) for f in faults)
    assert counts == {("kill", s): kills for s in SERVICES} | {("restart_kafka", "kafka"): 1}
    times = [f.at_s for f in faults]
    assert times == sorted(times)
    assert 0.1 * duration <= times[0] and times[-1] <= 0.85 * duration
    assert all(1.0 <= f.pause_s <= 5.0 for f in faults)


def test_same_seed_same_faults_and_no_kafka_when_not_asked() -> None:
    assert plan_faults(60, SERVICES, seed=1) == plan_faults(60, SERVICES, seed=1)
    assert plan_faults(60, SERVICES, seed=1) != plan_faults(60, SERVICES, seed=2)
    assert all(f.kind == "kill" for f in plan_faults(60, SERVICES, restart_kafka=False))
    with pytest.raises(ValueError):
        plan_faults(60, SERVICES, window=(0.5, 0.5))


class FakeService:
    def __init__(self, name: str) -> None:
        self.name = name
        self.events: list[str] = []

    def kill(self) -> bool:
        self.events.append("kill")
        return True

    def start(self) -> None:
        self.events.append("start")

    def stop(self) -> bool:
        self.events.append("stop")
        return True

    def check(self) -> Health:
        return Health(self.name, "", True, "")


def test_injector_kills_restarts_and_records() -> None:
    service, kafka = FakeService("writer"), FakeService("kafka")
    faults = [Fault(0.0, "kill", "writer", 0.01), Fault(0.02, "restart_kafka", "kafka", 0.01)]
    injector = FaultInjector(faults, {"writer": service}, kafka)
    injector.start()
    injector.join(10)
    assert service.events == ["kill", "start"]
    assert kafka.events == ["stop", "start"]
    assert [r.done for r in injector.records] == [True, True]


def test_an_object_store_outage_is_planned_once_for_its_whole_length() -> None:
    faults = plan_faults(300, SERVICES, seed=3, store_outage_s=60.0)
    outages = [f for f in faults if f.kind == "store_outage"]
    assert [(f.target, f.pause_s) for f in outages] == [("s3", 60.0)]
    assert all(f.kind != "store_outage" for f in plan_faults(300, SERVICES, seed=3))


def test_injector_takes_the_store_away_and_waits_for_it_back() -> None:
    store = FakeService("s3")
    injector = FaultInjector([Fault(0, "store_outage", "s3", 0.01)], {}, None, store=store)
    injector.run()
    assert store.events == ["stop", "start"]
    assert injector.records[0].done and "object store back" in injector.records[0].detail
    unowned = FaultInjector([Fault(0, "store_outage", "s3", 0.01)], {}, None)
    unowned.run()
    assert unowned.records[0].detail.startswith("skipped")


def test_injector_reports_a_failed_fault_and_goes_on() -> None:
    broken = FakeService("writer")
    broken.start = lambda: (_ for _ in ()).throw(RuntimeError("no python"))  # type: ignore[method-assign]
    healthy = FakeService("watcher")
    faults = [Fault(0, "kill", "writer", 0), Fault(0, "kill", "watcher", 0)]
    injector = FaultInjector(faults, {"writer": broken, "watcher": healthy}, None)
    injector.run()
    assert [r.done for r in injector.records] == [False, True]
    assert "no python" in injector.records[0].detail


def test_behind_and_caught_up() -> None:
    targets = {"shop.a": 1000, "shop.b": 2000}
    assert behind(targets, {"shop.a": 1000, "shop.b": 1500}) == {"shop.b": 500}
    assert behind(targets, {"shop.a": None}) == {"shop.a": 1000, "shop.b": 2000}
    assert caught_up(targets, {"shop.a": 1001, "shop.b": 2000}, 0, 0)
    assert not caught_up(targets, {"shop.a": 1001, "shop.b": 2000}, 0, 3)
    assert caught_up(targets, {"shop.a": 1001, "shop.b": 2000}, None, None)
    assert not caught_up(targets, {"shop.a": 999, "shop.b": 2000}, 0, 0)


def snapshot(props: dict[str, str] | None) -> SimpleNamespace:
    summary = None if props is None else SimpleNamespace(additional_properties=props)
    return SimpleNamespace(summary=summary)


def test_watermark_is_the_largest_among_writer_commits() -> None:
    snapshots = [
        snapshot({"icefjord.watermark-ms": "100"}),
        snapshot({"icefjord.watermark-ms": "250"}),
        snapshot({"operation": "replace"}),  # a compaction carries none
        snapshot(None),
    ]
    assert watermark_of(snapshots) == 250
    assert watermark_of([snapshot({})]) is None
