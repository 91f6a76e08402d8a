"""icefjord-console in a real browser: a real writer commits a demo-like table, the console
(``python -m services.console``, a Faust worker) folds the control topic, headless Chromium
shows the table with its freshness, and a click on pause pauses the writer.

Chromium and its driver are Debian's (``chromium``, ``chromium-driver``; ``.ci/run``
installs them): Selenium is given ``/usr/bin/chromedriver`` so that Selenium Manager never
downloads a browser. Without them the test fails under CI and skips elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from changes_support import Event, change_schema
from harness import Stack, free_port
from writer_support import (
    change_topic_in,
    producer_for,
    run_until_caught_up,
    start_writer,
    stepping,
    writer_settings,
)

from services.iceberg_writer.config import WriterSettings
from shared.avro import AvroCodec
from shared.catalog import open_catalog
from shared.control import ControlReader
from shared.events import (
    ControlEvent,
    OperatorCommand,
    OperatorCommandKind,
    OperatorCommandResult,
    OperatorCommandStatus,
)
from shared.kafka import make_consumer
from shared.registry import make_registry_client
from shared.settings import CHANGES_TOPIC_PREFIX

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
TOKEN = "console-test-token"
QUIET_S = 6.0  # three freshness targets (2 s): time enough for commits that should not come


def _browser_or_skip() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if not missing:
        return
    problem = f"{', '.join(missing)} missing: apt-get install chromium chromium-driver"
    if os.environ.get("CI"):
        pytest.fail(problem)
    pytest.skip(problem)


@pytest.fixture
def browser() -> Iterator[Any]:
    _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1600,1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def change_topic(stack: Stack, namespace: str) -> Iterator[str]:
    with change_topic_in(stack, namespace, "console") as name:
        yield name


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _post(url: str, token: str | None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, method="POST", data=b"")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_for(
    what: str, check: Callable[[], bool], timeout_s: float, step: Callable[[], None]
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        step()
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class RunningConsole:
    url: str
    process: subprocess.Popen[bytes]

    def stop(self) -> int:
        """SIGTERM, as Kubernetes and compose stop it; its exit code."""
        self.process.terminate()
        return self.process.wait(30)


@contextmanager
def console_running(
    stack: Stack, settings: WriterSettings, tmp_path: Path, **env: str
) -> Iterator[RunningConsole]:
    """``python -m services.console`` on a free port, reading the writer's topics."""
    port = free_port()
    values = {
        "ICEFJORD_CONSOLE_KAFKA__BOOTSTRAP_SERVERS": stack.kafka.bootstrap_servers,
        "ICEFJORD_CONSOLE_REGISTRY__URL": stack.registry.url,
        "ICEFJORD_CONSOLE_CONTROL_TOPIC": settings.control_topic,
        "ICEFJORD_CONSOLE_DEAD_LETTER_TOPIC": settings.dead_letter_topic,
        "ICEFJORD_CONSOLE_QUARANTINE_TOPIC": settings.quarantine_topic,
        "ICEFJORD_CONSOLE_APP_ID": f"console-{uuid.uuid4().hex[:8]}",
        "ICEFJORD_CONSOLE_METRICS__HOST": "127.0.0.1",
        "ICEFJORD_CONSOLE_METRICS__PORT": str(port),
        "ICEFJORD_CONSOLE_TOPIC_REPLICATION_FACTOR": "1",
        "ICEFJORD_CONSOLE_LOG_FORMAT": "console",
        "ICEFJORD_CONSOLE_DATA_DIR": str(tmp_path / "faust"),
        **env,
    }
    log_path = tmp_path / "console.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.console"],
            env={**os.environ, **values},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"console exited {process.returncode}: {log_path.read_text()}")
            try:
                return _get(f"{url}/readyz", 2)[0] == 200
            except OSError:
                return False

        wait_for("the console to be ready", ready, 120, lambda: time.sleep(0.5))
        yield RunningConsole(url, process)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        print(log_path.read_text()[-4000:])


def _text(browser: Any, selector: str) -> str | None:
    """The rendered text of the first element matching ``selector``, or None, read in one
    script call: the page re-renders its table on every poll, so an element found in one
    WebDriver call can be gone by the next (a stale element reference)."""
    text = browser.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText.trim() : null;",
        selector,
    )
    return None if text is None else str(text)


def _click(browser: Any, selector: str) -> None:
    """Click the first element matching ``selector`` in one script call, for the same reason."""
    clicked = browser.execute_script(
        "const e = document.querySelector(arguments[0]); if (e) { e.click(); } return !!e;",
        selector,
    )
    assert clicked, f"nothing on the page matches {selector}"


def data_commits(stack: Stack, table: str) -> int:
    snapshots = open_catalog(stack.catalog).load_table(table).snapshots()
    return sum(1 for s in snapshots if s.summary and "icefjord.offsets" in s.summary)


def control_events(stack: Stack, topic: str) -> list[ControlEvent]:
    """Every event on the control topic ``topic`` now."""
    consumer = make_consumer(
        stack.kafka, f"console-test-{uuid.uuid4().hex[:8]}", **{"auto.offset.reset": "earliest"}
    )
    reader = ControlReader(consumer, AvroCodec(make_registry_client(stack.registry)), topic)
    reader.subscribe()
    events: list[ControlEvent] = []
    try:
        idle = 0
        while idle < 3:
            batch = reader.poll(timeout=1.0)
            idle = 0 if batch else idle + 1
            events += batch
    finally:
        consumer.close()
    return events


def test_the_page_shows_a_tables_freshness_and_its_pause_button_pauses_the_writer(
    stack: Stack, change_topic: str, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    table = change_topic.removeprefix(CHANGES_TOPIC_PREFIX)
    schema = change_schema(*table.split("."))
    settings = writer_settings(stack, change_topic)
    writer = start_writer(settings)
    producer = producer_for(stack, change_topic)
    producer.send(
        schema, [Event(i, "CREATE", i, name=f"c{i}", amount="1.00") for i in range(1, 41)]
    )
    run_until_caught_up(writer)
    env = {"ICEFJORD_CONSOLE_ACTIONS": "true", "ICEFJORD_CONSOLE_TOKEN": TOKEN}
    try:
        with console_running(stack, settings, tmp_path, **env) as console:
            url = console.url

            # The API first: the writer's commit is folded, and actions refuse a bad token.
            def known() -> bool:
                status, body = _get(f"{url}/api/tables/{table}")
                return status == 200 and json.loads(body)["last_commit"] is not None

            wait_for("the console to fold the commit", known, 60, lambda: time.sleep(0.5))
            assert _post(f"{url}/api/tables/{table}/pause", None)[0] == 401
            assert _post(f"{url}/api/tables/{table}/pause", "wrong")[0] == 403
            status, refused = _post(f"{url}/api/tables/not-a-table/pause", TOKEN)
            assert status == 400 and refused["error"]

            browser.get(url)
            row = f'tr[data-table="{table}"]'

            def freshness_shown() -> bool:
                text = _text(browser, f"{row} td.freshness")
                return text is not None and text.endswith(("ms", "s", "min", "h"))

            wait_for("the page to show the table", freshness_shown, 30, lambda: time.sleep(0.3))
            badge = _text(browser, f"{row} td.health .badge")
            assert badge == "ok"
            assert _text(browser, f"{row} td.pause") == "running"
            commits = data_commits(stack, table)
            browser.find_element(By.ID, "token").send_keys(TOKEN)
            with stepping(writer):
                _click(browser, f'{row} button[data-action="pause"]')

                def paused_on_page() -> bool:
                    return _text(browser, f"{row} td.pause") == "paused (confirmed)"

                wait_for(
                    "the writer's answer on the page", paused_on_page, 60, lambda: time.sleep(0.5)
                )
            browser.save_screenshot(str(tmp_path / "console.png"))
            print(f"the page after the pause: {tmp_path / 'console.png'}")
            message = _text(browser, "#message") or ""
            assert message.startswith(f"pause published for {table}"), message

            events = control_events(stack, settings.control_topic)
            (command,) = [e for e in events if isinstance(e.payload, OperatorCommand)]
            assert command.producer == "icefjord-console"
            assert command.payload.command is OperatorCommandKind.PAUSE  # type: ignore[union-attr]
            answers = [
                e.payload
                for e in events
                if isinstance(e.payload, OperatorCommandResult)
                and e.payload.command_event_id == command.event_id
            ]
            assert [a.status for a in answers] == [OperatorCommandStatus.APPLIED]

            later = [Event(100 + i, "UPDATE", i, name=f"u{i}") for i in range(1, 21)]
            producer.send(schema, later)
            deadline = time.monotonic() + QUIET_S
            while time.monotonic() < deadline:
                writer.step()
            assert data_commits(stack, table) == commits, "a paused table took a commit"
            badge = _text(browser, f"{row} td.health .badge")
            assert badge == "paused"
            status, metrics = _get(f"{url}/metrics")
            assert status == 200
            assert (
                b'icefjord_console_actions_total{kind="pause",outcome="published"} 1.0' in metrics
            )
            assert b"icefjord_console_tables_known 1.0" in metrics
    finally:
        writer.close()


def test_the_console_is_read_only_by_default(
    stack: Stack, change_topic: str, tmp_path: Path
) -> None:
    settings = writer_settings(stack, change_topic)
    with console_running(stack, settings, tmp_path) as console:
        url = console.url
        status, body = _post(
            f"{url}/api/tables/{change_topic.removeprefix(CHANGES_TOPIC_PREFIX)}/pause", TOKEN
        )
        assert status == 403 and "actions are off" in body["error"]
        assert json.loads(_get(f"{url}/api/config")[1])["actions"] is False
        assert b"Icefjord console" in _get(url)[1]
        assert console.stop() == 0, "a SIGTERM is a clean stop"
