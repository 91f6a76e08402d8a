"""CPU priority for the maintainer while it holds a compaction lease.

While the lease is held the writer's commits to that table wait (``shared.lease``), so
every CPU second the rewrite waits for is a second of staleness for the table. On a machine
the services share (a laptop running the local stack) the rewrite competes with the
writer's own Spark, Kafka and the source: in the end-to-end benchmark a compaction took
several times longer at 1,000 changes/s than on an idle machine, and held the table all that
time (figures: docs/benchmarks/HISTORY.md, "Figures moved out of code comments").
:class:`LeaseBoost` raises the priority of this process and its children (the Spark JVM)
for the lease's duration, as a lock holder's priority is raised in an operating system, and
puts it back after.

Only a lease that holds the writer back is boosted: the executor skips the boost when the
writer's last commit to the table took a path that goes ahead under the lease
(``shared.lease.holds_writer_back``), where raising the rewrite would only slow those
commits down.

A higher priority than the default needs ``CAP_SYS_NICE`` (root on a laptop,
``cap_add: [SYS_NICE]`` in compose). Without it the first attempt logs once and the boost
turns itself off; nothing else changes. A nice value only counts against threads of the
same task group (``sched(7)``): where each service has a cgroup of its own (a container
in docker compose, a Kubernetes pod) the cgroups' CPU weights decide between the
maintainer and the writer, and the boost only orders the maintainer's own threads.

Linux keeps a nice value per thread, so the boost sets every thread of the process tree
(``/proc/<pid>/task``), and the restore sets every thread again, including those started
while boosted, which inherited the raised priority. Where the kernel groups processes by
session for scheduling (``sched_autogroup_enabled``, the default on desktop kernels), a
thread's nice only counts inside its session's group and the groups share the CPU equally:
every service runs in a session of its own, so the boost sets the group's nice too
(``/proc/<pid>/autogroup``). With the thread nice alone the rewrite above took as long as
without the boost.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LeaseBoost", "autogroup_nice", "process_tree", "threads_of"]

log = logging.getLogger(__name__)

_PROC = Path("/proc")


def process_tree(root: int, proc: Path = _PROC) -> list[int]:
    """``root`` and every descendant process (by parent pid in ``/proc/<pid>/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        # The command name is in parentheses and may itself hold spaces or parentheses.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) < 2:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def threads_of(pids: list[int], proc: Path = _PROC) -> list[int]:
    """Every thread id of ``pids`` (processes that exited meanwhile are skipped)."""
    tids: list[int] = []
    for pid in pids:
        try:
            tids.extend(int(t.name) for t in (proc / str(pid) / "task").iterdir())
        except OSError:
            continue
    return tids


def autogroup_nice(path: Path) -> int | None:
    """The nice of the scheduling group in ``/proc/<pid>/autogroup`` ("/autogroup-7 nice
    0"); None where there is none (autogroups off or not built in)."""
    try:
        fields = path.read_text().split()
    except OSError:
        return None
    if len(fields) != 3 or fields[1] != "nice":
        return None
    try:
        return int(fields[2])
    except ValueError:
        return None


class LeaseBoost:
    """Raise this process tree's CPU priority to ``nice`` inside :meth:`boosted`.

    ``nice`` None: off. The normal value is the process's own when the boost is made.
    """

    def __init__(self, nice: int | None, root: int | None = None, proc: Path = _PROC) -> None:
        self._nice = nice
        self._root = root if root is not None else os.getpid()
        self._proc = proc
        self._normal = os.getpriority(os.PRIO_PROCESS, 0)
        self._group = proc / str(self._root) / "autogroup"
        self._group_normal = autogroup_nice(self._group)
        self.enabled = nice is not None and nice < self._normal

    def _set(self, value: int, group: int | None) -> None:
        """Set every thread of the tree to ``value`` and the session's scheduling group to
        ``group`` (None: leave it)."""
        if group is not None:
            try:
                self._group.write_text(f"{group}\n")
            except PermissionError:
                raise
            except OSError:  # e.g. a read-only /proc: threads only from now on
                self._group_normal = None
        for tid in threads_of(process_tree(self._root, self._proc), self._proc):
            try:
                os.setpriority(os.PRIO_PROCESS, tid, value)
            except ProcessLookupError:  # the thread ended meanwhile
                continue

    @contextmanager
    def boosted(self) -> Iterator[None]:
        """The process tree at the raised priority inside, at its normal one after."""
        if not self.enabled or self._nice is None:
            yield
            return
        group = None if self._group_normal is None else self._nice
        try:
            self._set(self._nice, group)
        except PermissionError:
            self.enabled = False
            self._set(self._normal, None)  # threads set before the refusal go back
            log.info(
                "no permission to raise the maintainer's CPU priority during compaction "
                "leases (needs CAP_SYS_NICE); continuing without",
                extra={"nice": self._nice},
            )
            yield
            return
        try:
            yield
        finally:
            self._set(self._normal, self._group_normal)
