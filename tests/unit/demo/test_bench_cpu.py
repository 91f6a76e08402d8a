"""CPU seconds per component: /proc stat lines, sessions and trees, phase differences."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icefjord.demo.bench import BENCH_CLIENT, cpu_roots
from icefjord.demo.cpu import (
    ComponentTimes,
    CpuReading,
    ProcessTimes,
    Root,
    component_ticks,
    cpu_available,
    cpu_use,
    parse_machine_stat,
    parse_stat,
    pid_in_file,
    read_cpu,
    read_processes,
    reading_of,
)
from icefjord.local.services import NORMALIZER, WRITER, ServiceProcess
from icefjord.local.settings import LocalSettings

pytestmark = pytest.mark.unit

# A real /proc/<pid>/stat line (52 fields), its name holding spaces and parentheses:
# utime 150, stime 42, cutime 7, cstime 3.
STAT_LINE = (
    "4242 (tmux: (x) ) client) S 4100 4242 4242 34816 4242 4194304 1234 0 0 0 150 42 7 3 "
    "20 0 1 0 123456 12345678 500 18446744073709551615 1 1 0 0 0 0 0 4096 81923 0 0 0 17 1 "
    "0 0 0 0 0 0 0 0 0 0 0 0 0\n"
)

needs_proc = pytest.mark.skipif(not cpu_available(), reason="no /proc (not Linux)")


def proc(pid: int, ppid: int, session: int, own: int, reaped: int = 0) -> ProcessTimes:
    return ProcessTimes(pid, f"p{pid}", ppid, session, own, reaped)


def test_parse_stat_takes_the_fields_after_the_last_parenthesis() -> None:
    parsed = parse_stat(STAT_LINE)
    assert parsed == ProcessTimes(
        pid=4242,
        comm="tmux: (x) ) client",
        ppid=4100,
        session=4242,
        own_ticks=192,
        reaped_ticks=10,
    )
    assert parsed.ticks == 202


@pytest.mark.parametrize("line", ["", "4242 tmux S 1 2 3", "4242 (short) S 1 2 3 4 5\n"])
def test_parse_stat_rejects_what_is_not_a_stat_line(line: str) -> None:
    with pytest.raises(ValueError):
        parse_stat(line)


@needs_proc
def test_parse_stat_of_this_process() -> None:
    me = parse_stat(Path("/proc/self/stat").read_text())
    assert (me.pid, me.ppid, me.session) == (os.getpid(), os.getppid(), os.getsid(0))


def test_parse_machine_stat_counts_busy_ticks_only() -> None:
    text = "cpu  100 5 30 9000 40 2 3 1 50 0\ncpu0 60 5 10 4500 20 1 2 1 0 0\nintr 12345 0 0\n"
    # user + nice + system + irq + softirq + steal; not idle, iowait or guest (inside user)
    assert parse_machine_stat(text) == 100 + 5 + 30 + 2 + 3 + 1
    with pytest.raises(ValueError):
        parse_machine_stat("intr 1 2 3\n")


# A service (session 100: the Python leader, its JVM, the JVM's shell), another session
# (200), and a postmaster (300) whose children each lead their own session (301, 302; 303 is
# the child of 302).
PROCESSES = [
    proc(100, 1, 100, own=50, reaped=5),
    proc(110, 100, 100, own=400, reaped=20),
    proc(111, 110, 100, own=1),
    proc(200, 1, 200, own=1000),
    proc(300, 1, 300, own=10, reaped=30),
    proc(301, 300, 301, own=70),
    proc(302, 300, 302, own=80),
    proc(303, 302, 302, own=5),
]


def test_a_session_counts_its_members_with_what_they_reaped() -> None:
    assert component_ticks(PROCESSES, Root(100, "session")) == 55 + 420 + 1
    assert component_ticks(PROCESSES, Root(200, "session")) == 1000
    # The postmaster's session holds the postmaster only: why PostgreSQL needs a tree.
    assert component_ticks(PROCESSES, Root(300, "session")) == 40


def test_a_tree_counts_every_descendant_whatever_its_session() -> None:
    assert component_ticks(PROCESSES, Root(300, "tree")) == 40 + 70 + 80 + 5
    assert component_ticks(PROCESSES, Root(110, "tree")) == 421


def test_a_process_counts_its_own_time_only() -> None:
    assert component_ticks(PROCESSES, Root(100, "process")) == 50


def test_a_root_not_running_has_no_ticks() -> None:
    assert component_ticks(PROCESSES, Root(999, "session")) is None
    assert component_ticks(PROCESSES, Root(999, "tree")) is None


def test_reading_converts_ticks_and_marks_components_not_running() -> None:
    roots = {
        "writer": Root(100),
        "postgres": Root(300, "tree"),
        "gone": Root(999),
        "no pid": None,
    }
    reading = reading_of(5.0, roots, PROCESSES, 100.0, machine_ticks=123_400)
    assert reading.at == 5.0 and reading.machine_seconds == 1234.0
    assert reading.components == (
        ComponentTimes("writer", 100, 4.76),
        ComponentTimes("postgres", 300, 1.95),
        ComponentTimes("gone", None, 0.0),
        ComponentTimes("no pid", None, 0.0),
    )


def test_cpu_use_differences_and_coverage() -> None:
    start = CpuReading(
        10.0,
        (
            ComponentTimes("steady", 100, 5.0),
            ComponentTimes("restarted", 200, 30.0),
            ComponentTimes("killed", 300, 8.0),
            ComponentTimes("absent", None, 0.0),
            ComponentTimes("lost a child", 500, 9.0),
        ),
        machine_seconds=1000.0,
    )
    end = CpuReading(
        70.0,
        (
            ComponentTimes("steady", 100, 50.0),
            ComponentTimes("restarted", 201, 4.0),
            ComponentTimes("killed", None, 0.0),
            ComponentTimes("absent", None, 0.0),
            ComponentTimes("lost a child", 500, 7.0),
            ComponentTimes("started", 600, 2.5),
        ),
        machine_seconds=1100.0,
    )
    use = cpu_use(start, end, cores=2)
    by_name = {c.name: c for c in use.components}
    assert [c.name for c in use.components] == [c.name for c in end.components]
    assert (by_name["steady"].seconds, by_name["steady"].coverage) == (45.0, "whole")
    # A new leader: its session counted from 0, a lower bound.
    assert (by_name["restarted"].seconds, by_name["restarted"].coverage) == (4.0, "partial")
    assert (by_name["started"].seconds, by_name["started"].coverage) == (2.5, "partial")
    assert (by_name["killed"].seconds, by_name["killed"].coverage) == (None, "stopped")
    assert (by_name["absent"].seconds, by_name["absent"].coverage) == (None, "absent")
    # Fewer ticks than before: a process died unreaped; never a negative figure.
    assert (by_name["lost a child"].seconds, by_name["lost a child"].coverage) == (0.0, "partial")
    assert not by_name["steady"].lower_bound and by_name["restarted"].lower_bound
    assert by_name["killed"].lower_bound and not by_name["absent"].lower_bound
    assert use.wall_seconds == 60.0 and use.available_seconds == 120.0
    assert use.listed_seconds == 45.0 + 4.0 + 0.0 + 2.5
    assert use.listed_lower_bound
    assert use.machine_seconds == 100.0


def test_read_processes_skips_what_is_not_a_process(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "stat").write_text(STAT_LINE)
    (tmp_path / "17").mkdir()
    (tmp_path / "17" / "stat").write_text("garbage")
    (tmp_path / "18").mkdir()  # exited between listing and reading: no stat file
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "stat").write_text(STAT_LINE.replace("4242 (", "1 ("))
    assert [p.pid for p in read_processes(tmp_path)] == [4242]


def test_read_cpu_without_proc_is_none(tmp_path: Path) -> None:
    assert not cpu_available(tmp_path)
    assert read_cpu({"x": Root(1)}, tmp_path) is None


def test_pid_in_file(tmp_path: Path) -> None:
    postmaster = tmp_path / "postmaster.pid"
    postmaster.write_text("24987\n/var/lib/postgresql/data\n1700000000\n5432\n")
    assert pid_in_file(postmaster) == 24987
    (tmp_path / "kafka.pid").write_text("31\n")
    assert pid_in_file(tmp_path / "kafka.pid") == 31
    (tmp_path / "empty.pid").write_text("")
    assert pid_in_file(tmp_path / "empty.pid") is None
    (tmp_path / "junk.pid").write_text("not a pid")
    assert pid_in_file(tmp_path / "junk.pid") is None
    assert pid_in_file(tmp_path / "missing.pid") is None


def _burn(seconds: float) -> None:
    deadline = time.process_time() + seconds
    while time.process_time() < deadline:
        pass


# A child leading its own session, as the services do: it burns 0.3 s of CPU in a
# grandchild it reaps, says so, and waits to be stopped.
_SESSION_CHILD = """
import subprocess, sys, time
subprocess.run([sys.executable, "-c",
    "import time\\nd = time.process_time() + 0.3\\nwhile time.process_time() < d: pass"])
print("burnt", flush=True)
time.sleep(60)
"""


@needs_proc
def test_read_cpu_sees_processes_and_sessions_burn_cpu() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _SESSION_CHILD],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        roots = {"me": Root(os.getpid(), "process"), "child's session": Root(child.pid, "session")}
        start = read_cpu(roots)
        _burn(0.3)
        assert child.stdout is not None and child.stdout.readline() == "burnt\n"
        end = read_cpu(roots)
    finally:
        child.kill()
        child.wait()
    assert start is not None and end is not None
    use = {c.name: c for c in cpu_use(start, end, os.cpu_count() or 1).components}
    me, session = use["me"], use["child's session"]
    assert me.coverage == "whole" and me.seconds is not None
    assert 0.2 <= me.seconds <= 0.3 + end.at - start.at
    # The session's leader reaped the grandchild, so its 0.3 s count in the session.
    assert session.coverage == "whole" and session.seconds is not None
    assert 0.2 <= session.seconds <= end.at - start.at + 0.05


def test_cpu_roots_from_the_pid_files(tmp_path: Path) -> None:
    settings = LocalSettings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    run = settings.state / "run"
    run.mkdir(parents=True)
    (run / "kafka.pid").write_text("11")
    (run / "service-writer.pid").write_text("44")
    data = settings.postgres_home / "data"
    data.mkdir(parents=True)
    (data / "postmaster.pid").write_text("33\n/some/data\n")
    services = [ServiceProcess(NORMALIZER, settings), ServiceProcess(WRITER, settings)]
    roots = cpu_roots(settings, services)
    assert roots == {
        "PostgreSQL": Root(33, "tree"),
        "Kafka broker": Root(11, "session"),
        "schema registry": None,
        "Kafka Connect (Debezium)": None,
        "normalizer service": None,
        "writer service + Spark JVM": Root(44, "session"),
        BENCH_CLIENT: Root(os.getpid(), "process"),
    }
