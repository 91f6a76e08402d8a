"""shared.service.service_main: how a service run ends becomes its exit code."""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from shared.errors import FatalError, RetryableError
from shared.service import (
    EXIT_BAD_SETTINGS,
    EXIT_FATAL,
    EXIT_OK,
    GC_YOUNG_THRESHOLD,
    service_main,
)
from shared.settings import ServiceSettings

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def collector() -> Iterator[None]:
    """service_main tunes this process's garbage collector: put it back after each test."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


class Fenced(RuntimeError):
    """Stands for a service's own deliberate end, like the writer's fencing."""


def ending(exc: Exception | None, *, stop_first: bool = False) -> Callable[..., None]:
    def run(settings: ServiceSettings, stop: threading.Event) -> None:
        assert isinstance(settings, ServiceSettings)
        if stop_first:
            stop.set()
        if exc is not None:
            raise exc

    return run


def main(run: Callable[..., None], stop: threading.Event | None = None) -> int:
    return service_main(
        "test-service",
        ServiceSettings,
        run,
        exits=[(Fenced, 3, "fenced")],
        stop=stop or threading.Event(),
    )


def logged(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The JSON log lines the runs wrote to stdout (configure_logging owns the root logger)."""
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]


def test_a_run_that_returns_is_a_clean_stop() -> None:
    assert main(ending(None)) == EXIT_OK


def test_the_run_starts_with_the_start_up_objects_frozen_and_a_large_young_generation() -> None:
    seen: list[tuple[int, int]] = []

    def run(settings: ServiceSettings, stop: threading.Event) -> None:
        seen.append((gc.get_freeze_count(), gc.get_threshold()[0]))

    assert gc.get_freeze_count() == 0
    assert main(run) == EXIT_OK
    [(frozen, young)] = seen
    assert frozen > 1000
    assert young == GC_YOUNG_THRESHOLD


def test_fatal_and_os_errors_exit_1_with_one_log_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ending(FatalError("catalog says no"))) == EXIT_FATAL
    assert main(ending(OSError(98, "Address already in use"))) == EXIT_FATAL
    failed = [r for r in logged(capsys) if r["msg"] == "test-service failed"]
    assert [r["error"] for r in failed] == [
        "FatalError: catalog says no",
        "OSError: [Errno 98] Address already in use",
    ]
    assert all("exc" not in r for r in failed)  # one line, no traceback


def test_a_component_down_at_stop_time_is_still_a_clean_stop() -> None:
    assert main(ending(RetryableError("broker gone"), stop_first=True)) == EXIT_OK


def test_a_component_down_without_a_stop_is_fatal() -> None:
    assert main(ending(RetryableError("broker gone"))) == EXIT_FATAL


def test_a_service_rule_gives_its_own_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ending(Fenced("epoch 9 owns shop.orders"))) == 3
    fenced = [r for r in logged(capsys) if r["msg"] == "test-service fenced"]
    assert [r["error"] for r in fenced] == ["epoch 9 owns shop.orders"]


def test_a_bug_exits_1_with_its_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ending(KeyError("oops"))) == EXIT_FATAL
    crashed = [r for r in logged(capsys) if r["msg"] == "test-service crashed"]
    assert len(crashed) == 1
    assert "KeyError: 'oops'" in crashed[0]["exc"]


def test_invalid_settings_exit_2_with_one_line_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ICEFJORD_LOG_FORMAT", "xml")
    ran: list[bool] = []
    assert main(lambda s, e: ran.append(True)) == EXIT_BAD_SETTINGS
    assert ran == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("test-service: invalid settings: log_format")
