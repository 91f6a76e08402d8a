"""When the watcher polls: the schedule, the step that asks the probe, the probe's address."""

from __future__ import annotations

import httpx
import pytest
from pydantic import SecretStr

from services.schema_watcher.probe import NewestVersionProbe, PollSchedule, poll_when_due
from shared.errors import RetryableError
from shared.settings import RegistrySettings

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Answers:
    """A probe that answers from a list, one answer per question."""

    def __init__(self, *answers: int | None) -> None:
        self.answers = list(answers)

    def newest(self) -> int | None:
        return self.answers.pop(0)


def test_a_changed_answer_polls_at_once_and_an_unchanged_one_waits_for_the_interval() -> None:
    clock, polls, answers = Clock(), [], []
    schedule = PollSchedule(interval_s=2.0)
    probe = Answers(7, 7, 9, 9, 9)

    def step() -> bool:
        return poll_when_due(
            lambda: polls.append(clock.now), probe, schedule, clock, answers.append
        )

    assert step()  # never polled
    clock.now += 0.25
    assert not step()  # 7 again
    clock.now += 0.25
    assert step()  # 9: something was registered
    clock.now += 0.25
    assert not step()
    clock.now += 2.0
    assert step()  # the interval passed
    assert polls == [100.0, 100.5, 102.75]
    assert answers == ["new", "same", "new", "same", "same"]


def test_without_an_answer_the_interval_alone_decides() -> None:
    clock, polls = Clock(), []
    schedule = PollSchedule(interval_s=2.0)
    answers: list[str] = []

    def poll() -> None:
        polls.append(clock.now)

    for _ in range(12):  # three seconds of questions nobody answers
        poll_when_due(poll, Answers(None), schedule, clock, answers.append)
        clock.now += 0.25
    assert polls == [100.0, 102.0]
    assert answers == ["none"] * 12
    assert poll_when_due(lambda: polls.append(clock.now), None, schedule, clock) is False


def test_a_failed_poll_is_retried_at_the_next_question() -> None:
    clock = Clock()
    schedule = PollSchedule(interval_s=2.0)
    schedule.polled(7, clock.now)

    def failing() -> None:
        raise RetryableError("registry down")

    clock.now += 0.25
    with pytest.raises(RetryableError):
        poll_when_due(failing, Answers(8), schedule, clock)
    polls: list[float] = []
    clock.now += 0.25
    assert poll_when_due(lambda: polls.append(clock.now), Answers(8), schedule, clock)
    assert schedule.last_mark == 8


@pytest.mark.parametrize(
    ("url", "probe_url"),
    [
        (
            "http://127.0.0.1:8081/apis/ccompat/v7",
            "http://127.0.0.1:8081/apis/registry/v3/search/versions",
        ),
        (
            "https://registry.example:443/prefix/apis/ccompat/v6/",
            "https://registry.example:443/prefix/apis/registry/v3/search/versions",
        ),
    ],
)
def test_the_probe_sits_beside_apicurios_ccompat_api(url: str, probe_url: str) -> None:
    probe = NewestVersionProbe.for_registry(RegistrySettings(url=url))
    assert probe is not None and probe.url == probe_url
    probe.close()


def test_a_confluent_registry_gets_no_probe() -> None:
    assert NewestVersionProbe.for_registry(RegistrySettings(url="http://sr:8081")) is None


def answering(status: int, body: bytes, seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=body)

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(
    ("status", "body", "newest"),
    [
        (200, b'{"count": 67, "versions": [{"globalId": 67, "artifactId": "a-value"}]}', 67),
        (200, b'{"count": 0, "versions": []}', 0),
        (404, b'{"error_code": 404}', None),  # not Apicurio 3 after all
        (200, b"<html>a proxy's page</html>", None),
        (200, b'{"versions": [{"id": 3}]}', None),
    ],
)
def test_the_probe_reads_the_newest_global_id(status: int, body: bytes, newest: int | None) -> None:
    seen: list[httpx.Request] = []
    settings = RegistrySettings(
        url="http://r:8081/apis/ccompat/v7", basic_auth_user_info=SecretStr("ann:s3:cret")
    )
    probe = NewestVersionProbe.for_registry(settings, transport=answering(status, body, seen))
    assert probe is not None
    assert probe.newest() == newest
    (request,) = seen
    assert request.url.path == "/apis/registry/v3/search/versions"
    assert dict(request.url.params) == {"orderby": "globalId", "order": "desc", "limit": "1"}
    assert request.headers["Authorization"] == "Basic YW5uOnMzOmNyZXQ="  # ann:s3:cret
    probe.close()


def test_a_registry_that_does_not_answer_gives_no_answer() -> None:
    probe = NewestVersionProbe("http://127.0.0.1:9/apis/registry/v3/search/versions", None, 0.5)
    assert probe.newest() is None
    probe.close()
