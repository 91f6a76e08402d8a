"""The step watchdog: a step that never returns ends the process with EXIT_STUCK."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from shared.endpoint import Health
from shared.loop import EXIT_STUCK, StepWatchdog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _watchdog(limit_s: float) -> tuple[StepWatchdog, Clock, list[int], Health]:
    clock, exits, health = Clock(), [], Health()
    health.ready()
    watchdog = StepWatchdog(limit_s, health, exit=exits.append, clock=clock)
    watchdog.close()  # the tests call check() themselves
    return watchdog, clock, exits, health


def test_an_overdue_step_exits_once_and_marks_the_service_dead() -> None:
    watchdog, clock, exits, health = _watchdog(60)
    watchdog.started()
    clock.now += 59.9
    assert not watchdog.check()
    clock.now += 0.2
    assert watchdog.check()
    assert exits == [EXIT_STUCK]
    assert not health.is_alive
    assert not watchdog.check()
    assert exits == [EXIT_STUCK]


def test_a_finished_step_is_not_watched() -> None:
    watchdog, clock, exits, _ = _watchdog(60)
    watchdog.started()
    clock.now += 30
    watchdog.finished()
    clock.now += 3600
    assert not watchdog.check()
    watchdog.started()  # each step has its own limit
    clock.now += 59
    assert not watchdog.check()
    assert exits == []


def test_a_limit_of_zero_never_fires() -> None:
    watchdog, clock, exits, _ = _watchdog(0)
    watchdog.started()
    clock.now += 10**6
    assert not watchdog.check()
    assert exits == []


def test_a_stuck_process_logs_where_and_exits_with_its_code() -> None:
    """A real process whose step blocks forever: it exits 4 on its own, and its log names
    the function the step is stuck in."""
    script = textwrap.dedent(
        """
        import threading, time
        from shared.endpoint import Health
        from shared.logs import configure_logging
        from shared.loop import run_loop

        def wedged_client_call() -> None:
            time.sleep(3600)

        configure_logging("INFO", "json")
        run_loop(wedged_client_call, threading.Event(), Health(), stuck_after_s=0.5)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == EXIT_STUCK, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    stuck = [r for r in records if r["msg"].startswith("step stuck")]
    assert len(stuck) == 1, done.stdout
    assert "wedged_client_call" in stuck[0]["stack"]
    assert stuck[0]["exit_code"] == EXIT_STUCK
