"""CPU seconds per component of the benchmark, from Linux's ``/proc``.

A component is found from one root pid, in one of three ways (:class:`Root`):

- ``session``: every process whose session id (field 6 of ``/proc/<pid>/stat``) is the root.
  The local stack and the services are started with ``start_new_session=True``, so a
  service's Spark JVM (and the JVM's own children) count with the service.
- ``tree``: the root and all its descendants by parent pid. PostgreSQL needs this: the
  postmaster leads its own session, but every backend and auxiliary process it forks calls
  ``setsid()`` and leads a session of its own.
- ``process``: the root's own time only (the benchmark's CLI: the services it starts and
  later reaps would otherwise count twice).

In a session or a tree, a process's time is ``utime + stime + cutime + cstime``: the
children it has reaped count with it, so a Spark Python worker or a PostgreSQL backend that
exits within a phase is not lost. Processes reaped by nobody in the component drop out.

Of that time, a component also reports the part its JVMs (processes named ``java``) spent in
HotSpot's JIT compiler threads and in its garbage collector's threads, from the threads'
own stat files (``/proc/<pid>/task/<tid>/stat``), classified by name
(:func:`thread_kind`). Soon after a JVM starts, compiling its hot code can cost as much as
the work itself; these figures tell that warm-up from steady-state cost.

Pure: :func:`parse_stat`, :func:`thread_kind`, :func:`parse_machine_stat`,
:func:`component_members`, :func:`component_totals`,
:func:`reading_of`, :func:`cpu_use`. The shell (:func:`read_processes`, :func:`read_cpu`)
reads ``/proc``; :func:`cpu_available` says whether there is one (there is none on macOS).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

PROC = Path("/proc")

JVM_COMM = "java"
"""The command name of a HotSpot JVM process: only these have their threads read."""

Grouping = Literal["session", "tree", "process"]
Coverage = Literal["whole", "partial", "stopped", "absent"]
ThreadKind = Literal["jit", "gc"]


@dataclass(frozen=True)
class JvmThread:
    """One JIT compiler or garbage collector thread of a JVM: its thread id, what it does
    (:func:`thread_kind`) and its CPU so far (utime + stime), in its holder's unit: clock
    ticks in :class:`ProcessTimes`, seconds in :class:`ComponentTimes`.

    Kept per thread because HotSpot stops compiler threads it no longer needs: a sum over
    the live threads would fall when one exits, and a phase's figure with it. Matched by
    thread id, a phase counts what each thread did in it, losing only the part of a thread
    that exited before the phase ended."""

    tid: int
    kind: ThreadKind
    time: float


@dataclass(frozen=True)
class ProcessTimes:
    """One line of ``/proc/<pid>/stat``, reduced to what CPU accounting needs, in clock
    ticks (``SC_CLK_TCK``): ``own_ticks`` = utime + stime (all its threads), ``reaped_ticks``
    = cutime + cstime (its children it has waited for). ``jvm_threads``: its JIT compiler
    and garbage collector threads (part of ``own_ticks``); read for JVMs only, none for any
    other process."""

    pid: int
    comm: str
    ppid: int
    session: int
    own_ticks: int
    reaped_ticks: int
    jvm_threads: tuple[JvmThread, ...] = ()

    @property
    def ticks(self) -> int:
        return self.own_ticks + self.reaped_ticks


def parse_stat(line: str) -> ProcessTimes:
    """Parse one ``/proc/<pid>/stat`` line; raises ValueError if it is not one.

    The command name (field 2) is in parentheses and may itself hold spaces and
    parentheses, so the fields after it are those after the *last* ``)``."""
    head, paren, tail = line.rpartition(")")
    pid_text, open_paren, comm = head.partition(" (")
    if not paren or not open_paren:
        raise ValueError(f"not a /proc stat line: {line[:80]!r}")
    fields = tail.split()
    if len(fields) < 15:
        raise ValueError(f"too few fields in a /proc stat line: {line[:80]!r}")
    # fields[0] is field 3 (state): field n of proc(5) is fields[n - 3].
    ppid, session = int(fields[1]), int(fields[3])
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return ProcessTimes(
        pid=int(pid_text),
        comm=comm,
        ppid=ppid,
        session=session,
        own_ticks=utime + stime,
        reaped_ticks=cutime + cstime,
    )


def thread_kind(comm: str) -> ThreadKind | None:
    """What a HotSpot thread does, by its name as ``/proc`` gives it (cut to 15 characters
    by Linux): ``"jit"`` for a C1 or C2 compiler thread (``C2 CompilerThread0``), ``"gc"``
    for a collector thread (ParallelGC's and G1's workers, ``GC Thread#0``; G1's concurrent
    marking, refinement and service threads, ``G1 Conc#0``), None for any other."""
    if comm.startswith(("C1 CompilerThre", "C2 CompilerThre")):
        return "jit"
    if comm.startswith(("GC Thread", "G1 ")):
        return "gc"
    return None


def parse_machine_stat(text: str) -> int:
    """Busy clock ticks of all CPUs since boot from ``/proc/stat`` (its ``cpu`` line: user,
    nice, system, irq, softirq, steal; guest time is already inside user and nice); raises
    ValueError without a ``cpu`` line."""
    for line in text.splitlines():
        name, *values = line.split()
        if name == "cpu":
            ticks = [int(v) for v in values] + [0] * 8
            user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
            return user + nice + system + irq + softirq + steal
    raise ValueError("no cpu line in /proc/stat")


@dataclass(frozen=True)
class Root:
    """Where a component's processes hang from: ``pid`` and how the rest are found."""

    pid: int
    grouping: Grouping = "session"


def component_members(processes: Iterable[ProcessTimes], root: Root) -> list[ProcessTimes] | None:
    """The processes of ``root``'s component among ``processes`` (see :class:`Root`); None
    when the root itself is not among them (the component is not running)."""
    by_pid = {p.pid: p for p in processes}
    if root.pid not in by_pid:
        return None
    if root.grouping == "process":
        return [by_pid[root.pid]]
    if root.grouping == "session":
        return [p for p in by_pid.values() if p.session == root.pid]
    children: dict[int, list[int]] = {}
    for p in by_pid.values():
        children.setdefault(p.ppid, []).append(p.pid)
    members, todo, seen = [], [root.pid], set[int]()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        members.append(by_pid[pid])
        todo.extend(children.get(pid, ()))
    return members


@dataclass(frozen=True)
class ComponentTicks:
    """A component's clock ticks: ``ticks`` in all, and of them ``jvm_threads`` in its JVMs'
    compiler and collector threads."""

    ticks: int
    jvm_threads: tuple[JvmThread, ...] = ()


def component_totals(processes: Iterable[ProcessTimes], root: Root) -> ComponentTicks | None:
    """The clock ticks of ``root``'s component among ``processes``; None when the root
    itself is not among them (the component is not running).

    ``process`` grouping counts the root's own time only; the others count each member with
    the children it reaped. JIT and GC ticks are the live members' own threads only: a
    reaped JVM's threads are gone with it, so its compiler and collector time is inside
    ``ticks`` but not told apart."""
    members = component_members(processes, root)
    if members is None:
        return None
    own_only = root.grouping == "process"
    return ComponentTicks(
        ticks=sum(p.own_ticks if own_only else p.ticks for p in members),
        jvm_threads=tuple(t for p in members for t in p.jvm_threads),
    )


@dataclass(frozen=True)
class ComponentTimes:
    """One component at one instant: its root pid (None: not running) and CPU seconds so
    far of the processes found from it; ``jvm_threads``: its JVMs' JIT compiler and garbage
    collector threads, with their seconds so far."""

    name: str
    root: int | None
    seconds: float
    jvm_threads: tuple[JvmThread, ...] = ()

    @property
    def jit_seconds(self) -> float:
        return sum(t.time for t in self.jvm_threads if t.kind == "jit")

    @property
    def gc_seconds(self) -> float:
        return sum(t.time for t in self.jvm_threads if t.kind == "gc")


@dataclass(frozen=True)
class CpuReading:
    """Every component at monotonic time ``at``; ``machine_seconds``: busy CPU seconds of
    the whole machine since boot (None: unknown)."""

    at: float
    components: tuple[ComponentTimes, ...]
    machine_seconds: float | None


def reading_of(
    at: float,
    roots: Mapping[str, Root | None],
    processes: Iterable[ProcessTimes],
    ticks_per_second: float,
    machine_ticks: int | None = None,
) -> CpuReading:
    """A reading of ``roots`` (component -> root, None: no pid known) among ``processes``,
    in ``roots``' order; ``machine_ticks``: see :func:`parse_machine_stat`."""
    listed = list(processes)
    components = []
    for name, root in roots.items():
        totals = None if root is None else component_totals(listed, root)
        if root is None or totals is None:
            components.append(ComponentTimes(name, None, 0.0))
        else:
            components.append(
                ComponentTimes(
                    name,
                    root.pid,
                    totals.ticks / ticks_per_second,
                    tuple(
                        JvmThread(t.tid, t.kind, t.time / ticks_per_second)
                        for t in totals.jvm_threads
                    ),
                )
            )
    machine = None if machine_ticks is None else machine_ticks / ticks_per_second
    return CpuReading(at, tuple(components), machine)


@dataclass(frozen=True)
class ComponentUse:
    """One component's CPU seconds in a phase. ``coverage``: *whole* (the same root at both
    ends), *partial* (a new root at the end, e.g. a restarted service, counted from its
    start: a lower bound), *stopped* (running at the start, not at the end: unknown,
    ``seconds`` None), *absent* (running at neither end, ``seconds`` None). ``jit_seconds``
    and ``gc_seconds``: the part of ``seconds`` in its JVMs' JIT compiler and garbage
    collector threads, by the same rules."""

    name: str
    seconds: float | None
    coverage: Coverage
    jit_seconds: float | None = None
    gc_seconds: float | None = None

    @property
    def lower_bound(self) -> bool:
        return self.coverage in ("partial", "stopped")


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds per component between two readings, ``wall_seconds`` apart, on a machine
    of ``cores`` cores; ``machine_seconds``: busy seconds of the whole machine."""

    wall_seconds: float
    cores: int
    components: tuple[ComponentUse, ...]
    machine_seconds: float | None

    @property
    def available_seconds(self) -> float:
        """What the machine could have given: cores x wall seconds."""
        return self.cores * self.wall_seconds

    @property
    def listed_seconds(self) -> float:
        """All components together (a lower bound when one of them is)."""
        return sum(c.seconds or 0.0 for c in self.components)

    @property
    def listed_lower_bound(self) -> bool:
        return any(c.lower_bound for c in self.components)


def _use(name: str, start: ComponentTimes | None, end: ComponentTimes) -> ComponentUse:
    was = None if start is None else start.root
    if end.root is None:
        return ComponentUse(name, None, "absent" if was is None else "stopped")
    if start is None or was != end.root:
        return ComponentUse(name, end.seconds, "partial", end.jit_seconds, end.gc_seconds)
    step = end.seconds - start.seconds
    before = {t.tid: t.time for t in start.jvm_threads}

    def grown(kind: ThreadKind) -> float:
        # Each thread at the end since the start (a new one: since it started); a thread
        # that exited in the phase took its part along.
        return sum(
            max(0.0, t.time - before.get(t.tid, 0.0)) for t in end.jvm_threads if t.kind == kind
        )

    # Lower: a process died without a reaper in the component and took its time along.
    return ComponentUse(
        name, max(0.0, step), "whole" if step >= 0 else "partial", grown("jit"), grown("gc")
    )


def cpu_use(start: CpuReading, end: CpuReading, cores: int) -> CpuUse:
    """The CPU each component of ``end`` used since ``start`` (see :class:`ComponentUse`),
    in ``end``'s order."""
    before = {c.name: c for c in start.components}
    machine = None
    if start.machine_seconds is not None and end.machine_seconds is not None:
        machine = max(0.0, end.machine_seconds - start.machine_seconds)
    return CpuUse(
        wall_seconds=max(0.0, end.at - start.at),
        cores=cores,
        components=tuple(_use(c.name, before.get(c.name), c) for c in end.components),
        machine_seconds=machine,
    )


# -- the shell: reading /proc ----------------------------------------------------------------


def cpu_available(proc: Path = PROC) -> bool:
    """True where ``/proc`` has per-process stat files (Linux)."""
    return (proc / "self" / "stat").exists()


def read_processes(proc: Path = PROC) -> list[ProcessTimes]:
    """Every process in ``proc`` now, a JVM's with its JIT and GC ticks (see
    :func:`_jvm_threads`); those that exit while it is read drop out."""
    out = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            process = parse_stat((entry / "stat").read_text())
            # Threads of JVMs only: reading every thread of every process would cost far
            # more than the accounting is worth.
            if process.comm == JVM_COMM:
                process = replace(process, jvm_threads=_jvm_threads(entry / "task"))
        except (OSError, ValueError):
            continue
        out.append(process)
    return out


def _jvm_threads(tasks: Path) -> tuple[JvmThread, ...]:
    """The JIT compiler and garbage collector threads in ``tasks`` (a process's
    ``/proc/<pid>/task``) with their ticks (utime + stime); threads that exit while it is
    read drop out. Raises OSError when ``tasks`` cannot be listed (the process exited)."""
    threads = []
    for task in tasks.iterdir():
        try:
            thread = parse_stat((task / "stat").read_text())
        except (OSError, ValueError):
            continue
        kind = thread_kind(thread.comm)
        if kind is not None:
            threads.append(JvmThread(thread.pid, kind, thread.own_ticks))
    return tuple(threads)


def pid_in_file(path: Path) -> int | None:
    """The pid on the first line of ``path`` (a pid file, ``postmaster.pid``); None when the
    file is missing, unreadable or holds no pid."""
    try:
        first = path.read_text().splitlines()[0]
        return int(first.strip())
    except (OSError, IndexError, ValueError):
        return None


def read_cpu(roots: Mapping[str, Root | None], proc: Path = PROC) -> CpuReading | None:
    """A reading of ``roots`` (see :func:`reading_of`) now; None without ``/proc``."""
    if not cpu_available(proc):
        return None
    try:
        machine: int | None = parse_machine_stat((proc / "stat").read_text())
    except (OSError, ValueError):
        machine = None
    return reading_of(
        time.monotonic(),
        roots,
        read_processes(proc),
        float(os.sysconf("SC_CLK_TCK")),
        machine,
    )
