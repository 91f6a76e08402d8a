"""CPU seconds per component: /proc stat lines, sessions and trees, phase differences."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icefjord.bench.cpu import (
    ComponentTicks,
    ComponentTimes,
    ComponentUse,
    CpuReading,
    JvmThread,
    ProcessTimes,
    Root,
    component_members,
    component_totals,
    cpu_available,
    cpu_use,
    parse_machine_stat,
    parse_stat,
    pid_in_file,
    read_cpu,
    read_processes,
    reading_of,
    thread_kind,
)
from icefjord.bench.pipeline import BENCH_CLIENT, cpu_roots
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


@pytest.mark.parametrize(
    ("comm", "kind"),
    [
        ("C2 CompilerThre", "jit"),
        ("C1 CompilerThre", "jit"),
        ("GC Thread#0", "gc"),
        ("GC Thread#12", "gc"),
        ("G1 Conc#0", "gc"),
        ("G1 Refine#0", "gc"),
        ("G1 Main Marker", "gc"),
        ("G1 Service", "gc"),
        ("VM Thread", None),
        ("java", None),
        ("kafka-producer-", None),
        ("C2 Compiler", None),  # not cut where Linux cuts: not HotSpot's name
        ("G1Young", None),
    ],
)
def test_thread_kind_by_hotspot_thread_names(comm: str, kind: str | None) -> None:
    assert thread_kind(comm) == kind


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


def ticks_of(processes: list[ProcessTimes], root: Root) -> int | None:
    """A component's ticks in all (:func:`component_totals`), None when it is not running."""
    totals = component_totals(processes, root)
    return None if totals is None else totals.ticks


def test_a_session_counts_its_members_with_what_they_reaped() -> None:
    assert ticks_of(PROCESSES, Root(100, "session")) == 55 + 420 + 1
    assert ticks_of(PROCESSES, Root(200, "session")) == 1000
    # The postmaster's session holds the postmaster only: why PostgreSQL needs a tree.
    assert ticks_of(PROCESSES, Root(300, "session")) == 40


def test_a_tree_counts_every_descendant_whatever_its_session() -> None:
    assert ticks_of(PROCESSES, Root(300, "tree")) == 40 + 70 + 80 + 5
    assert ticks_of(PROCESSES, Root(110, "tree")) == 421


def test_a_process_counts_its_own_time_only() -> None:
    assert ticks_of(PROCESSES, Root(100, "process")) == 50


def test_a_root_not_running_has_no_ticks() -> None:
    assert ticks_of(PROCESSES, Root(999, "session")) is None
    assert ticks_of(PROCESSES, Root(999, "tree")) is None
    assert component_members(PROCESSES, Root(999, "process")) is None
    assert component_totals(PROCESSES, Root(999, "tree")) is None


def jvm(pid: int, ppid: int, session: int, own: int, jit: int, gc: int) -> ProcessTimes:
    """A JVM with one compiler thread (tid pid + 1) and one collector thread (pid + 2)."""
    threads = (JvmThread(pid + 1, "jit", jit), JvmThread(pid + 2, "gc", gc))
    return ProcessTimes(pid, "java", ppid, session, own, 0, jvm_threads=threads)


def ticks(total: int, *jvms: tuple[int, int, int]) -> ComponentTicks:
    """``total`` ticks with the threads of :func:`jvm` JVMs given as (pid, jit, gc)."""
    return ComponentTicks(
        total,
        tuple(
            t
            for pid, jit, gc in jvms
            for t in (JvmThread(pid + 1, "jit", jit), JvmThread(pid + 2, "gc", gc))
        ),
    )


# The same shape with JVMs: a service's Spark JVM (110) in session 100, a JVM (210) in the
# tree of 300 in a session of its own, and a JVM leading session 200 (the broker).
JVM_PROCESSES = [
    proc(100, 1, 100, own=50, reaped=5),
    jvm(110, 100, 100, own=400, jit=120, gc=30),
    proc(111, 110, 100, own=1),
    jvm(200, 1, 200, own=1000, jit=300, gc=40),
    proc(300, 1, 300, own=10, reaped=30),
    jvm(310, 300, 310, own=70, jit=20, gc=5),
    proc(311, 310, 310, own=2),
]


def test_components_sum_jit_and_gc_ticks_of_their_members() -> None:
    session = component_members(JVM_PROCESSES, Root(100, "session"))
    assert session is not None and sorted(p.pid for p in session) == [100, 110, 111]
    assert component_totals(JVM_PROCESSES, Root(100, "session")) == ticks(
        55 + 400 + 1, (110, 120, 30)
    )
    assert component_totals(JVM_PROCESSES, Root(200, "session")) == ticks(1000, (200, 300, 40))
    tree = component_members(JVM_PROCESSES, Root(300, "tree"))
    assert tree is not None and sorted(p.pid for p in tree) == [300, 310, 311]
    assert component_totals(JVM_PROCESSES, Root(300, "tree")) == ticks(40 + 70 + 2, (310, 20, 5))
    # The JVM's session is its own, so the postmaster's session holds none of its threads.
    assert component_totals(JVM_PROCESSES, Root(300, "session")) == ticks(40)


def test_a_process_counts_its_own_jit_and_gc_ticks_only() -> None:
    assert component_totals(JVM_PROCESSES, Root(110, "process")) == ticks(400, (110, 120, 30))
    assert component_totals(JVM_PROCESSES, Root(100, "process")) == ticks(50)


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


def test_reading_converts_jit_and_gc_ticks_to_seconds() -> None:
    roots = {"writer": Root(100), "broker": Root(200), "gone": Root(999)}
    reading = reading_of(5.0, roots, JVM_PROCESSES, 100.0)
    assert reading.components == (
        ComponentTimes("writer", 100, 4.56, threads(110, jit=1.2, gc=0.3)),
        ComponentTimes("broker", 200, 10.0, threads(200, jit=3.0, gc=0.4)),
        ComponentTimes("gone", None, 0.0),
    )
    assert (reading.components[0].jit_seconds, reading.components[0].gc_seconds) == (1.2, 0.3)


def threads(pid: int, *, jit: float, gc: float) -> tuple[JvmThread, ...]:
    """The two threads of a :func:`jvm`, in seconds."""
    return (JvmThread(pid + 1, "jit", jit), JvmThread(pid + 2, "gc", gc))


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


def test_cpu_use_jit_and_gc_differences_and_coverage() -> None:
    c2 = [JvmThread(11, "jit", 10.0), JvmThread(12, "jit", 5.0), JvmThread(13, "gc", 2.0)]
    start = CpuReading(
        10.0,
        (
            ComponentTimes("broker", 100, 40.0, tuple(c2)),
            ComponentTimes("connect", 200, 30.0, threads(200, jit=9.0, gc=1.0)),
            ComponentTimes("killed", 300, 8.0, threads(300, jit=1.0, gc=1.0)),
        ),
        machine_seconds=None,
    )
    end = CpuReading(
        70.0,
        (
            # Thread 11 compiled 1.5 s more; thread 12 (with its 5 s) exited; thread 14 is
            # new and compiled 3 s; the collector 1.5 s more.
            ComponentTimes(
                "broker",
                100,
                60.0,
                (
                    JvmThread(11, "jit", 11.5),
                    JvmThread(13, "gc", 3.5),
                    JvmThread(14, "jit", 3.0),
                ),
            ),
            ComponentTimes("connect", 201, 12.0, threads(201, jit=7.0, gc=0.5)),
            ComponentTimes("killed", None, 0.0),
            ComponentTimes("absent", None, 0.0),
        ),
        machine_seconds=None,
    )
    by_name = {c.name: c for c in cpu_use(start, end, cores=2).components}
    # Per thread: the exited thread's 5 s do not make the phase's figure fall.
    assert by_name["broker"] == ComponentUse("broker", 20.0, "whole", 1.5 + 3.0, 1.5)
    # A new JVM: counted from its start, like its seconds.
    assert by_name["connect"] == ComponentUse("connect", 12.0, "partial", 7.0, 0.5)
    assert by_name["killed"] == ComponentUse("killed", None, "stopped", None, None)
    assert by_name["absent"] == ComponentUse("absent", None, "absent", None, None)


def test_read_processes_skips_what_is_not_a_process(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "stat").write_text(STAT_LINE)
    (tmp_path / "17").mkdir()
    (tmp_path / "17" / "stat").write_text("garbage")
    (tmp_path / "18").mkdir()  # exited between listing and reading: no stat file
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "stat").write_text(STAT_LINE.replace("4242 (", "1 ("))
    assert [p.pid for p in read_processes(tmp_path)] == [4242]


def _stat_line(pid: int, comm: str, utime: int, stime: int) -> str:
    return STAT_LINE.replace("4242 (tmux: (x) ) client)", f"{pid} ({comm})").replace(
        " 4100 4242 4242 34816 4242 4194304 1234 0 0 0 150 42 7 3 ",
        f" 1 {pid} {pid} 34816 {pid} 4194304 1234 0 0 0 {utime} {stime} 0 0 ",
    )


def _process(proc_dir: Path, pid: int, comm: str, threads: dict[int, tuple[str, int]]) -> None:
    """A process ``pid`` in a fake ``/proc``, with ``threads``: tid -> (comm, utime)."""
    (proc_dir / str(pid)).mkdir()
    total = sum(utime for _, utime in threads.values())
    (proc_dir / str(pid) / "stat").write_text(_stat_line(pid, comm, total, 0))
    for tid, (thread_comm, utime) in threads.items():
        task = proc_dir / str(pid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "stat").write_text(_stat_line(tid, thread_comm, utime - 1, 1))


def test_read_processes_reads_the_threads_of_jvms_only(tmp_path: Path) -> None:
    _process(
        tmp_path,
        500,
        "java",
        {
            500: ("java", 30),
            501: ("C2 CompilerThre", 1160),
            502: ("C1 CompilerThre", 40),
            503: ("GC Thread#0", 90),
            504: ("G1 Conc#0", 30),
            505: ("kafka-request-h", 950),
        },
    )
    (tmp_path / "500" / "task" / "506").mkdir()  # a thread that exited while read
    (tmp_path / "500" / "task" / "507").mkdir()
    (tmp_path / "500" / "task" / "507" / "stat").write_text("garbage")
    # Not a JVM (whatever its threads are called): its tasks are not read.
    _process(tmp_path, 600, "python3", {600: ("python3", 5), 601: ("C2 CompilerThre", 700)})
    # A JVM whose threads are gone (it exited while read): it drops out.
    (tmp_path / "700").mkdir()
    (tmp_path / "700" / "stat").write_text(_stat_line(700, "java", 10, 0))
    by_pid = {p.pid: p for p in read_processes(tmp_path)}
    assert sorted(by_pid) == [500, 600]
    java, python = by_pid[500], by_pid[600]
    assert java.own_ticks == 2300
    assert sorted(java.jvm_threads, key=lambda t: t.tid) == [
        JvmThread(501, "jit", 1160),
        JvmThread(502, "jit", 40),
        JvmThread(503, "gc", 90),
        JvmThread(504, "gc", 30),
    ]
    assert (python.own_ticks, python.jvm_threads) == (705, ())


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
    (run / "s3.pid").write_text("22")
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
        "S3 server (SeaweedFS)": Root(22, "session"),
        "normalizer service": None,
        "writer service + Spark JVM": Root(44, "session"),
        BENCH_CLIENT: Root(os.getpid(), "process"),
    }
