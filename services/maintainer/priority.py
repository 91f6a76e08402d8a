"""CPU priority for the maintainer: raised while the writer waits for its compaction lease,
lowered to the background otherwise.

While the lease is held the writer's commits to that table wait (``shared.lease``), so
every CPU second the rewrite waits for is a second of staleness for the table. On a machine
the services share (a laptop running the local stack) the rewrite competes with the
writer's own Spark, Kafka and the source: in the end-to-end benchmark a compaction that
takes 0.9 s on an idle machine took 7.2 s at 1,000 changes/s, and held the table all that
time. :class:`LeaseBoost` raises the priority of this process and its children (the Spark
JVM) for the lease's duration, as a lock holder's priority is raised in an operating
system, and puts it back after.

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
(``/proc/<pid>/autogroup``). With the thread nice alone the rewrite above still took 7.0 s.

**In the background otherwise.** A rewrite nobody waits for, and everything else the
maintainer does, is background work: on a shared machine it should take the CPU the
pipeline leaves over, not an equal share of a saturated machine. :meth:`LeaseBoost.to_background`
moves the tree and its scheduling group to a higher nice (``BACKGROUND_NICE``) for good;
a boosted lease goes from there to the boost and back. Once a thread's nice is raised, only
``CAP_SYS_NICE`` or ``RLIMIT_NICE`` lets it come down again, so the move is made only where
a trial thread shows it can: otherwise a lease the writer waits for would run in the
background too. Inside a boost without a boost value of its own (``nice`` None) the tree
runs at its normal priority.

**Bounded.** A rewrite held back by a saturated machine costs more when it finally runs:
the writer's equality deletes reach every older data file, so each minute a compaction
waits adds to its work, and in the background alone compactions grew from about 6 to 23-28
CPU s each and tables reached 222 data files (docs/benchmarks/HISTORY.md). A rewrite that is
overdue (the service's ``BACKGROUND_MAX_PRESSURE``) or that an operator asked for runs
inside :meth:`LeaseBoost.foreground`, at normal priority, and the background has a bound.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LeaseBoost", "autogroup_nice", "can_come_back", "process_tree", "threads_of"]

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


def can_come_back(raised: int, normal: int) -> bool:
    """Whether a thread of this process that raised its nice to ``raised`` may lower it to
    ``normal`` again (``CAP_SYS_NICE``, or an ``RLIMIT_NICE`` that allows ``normal``). Tried
    on a short-lived thread of its own, so no other thread's priority changes."""
    outcome: list[bool] = []

    def trial() -> None:
        tid = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, raised)
            os.setpriority(os.PRIO_PROCESS, tid, normal)
        except PermissionError:
            outcome.append(False)
        else:
            outcome.append(True)

    thread = threading.Thread(target=trial, name="nice-trial", daemon=True)
    thread.start()
    thread.join()
    return outcome == [True]


class LeaseBoost:
    """Raise this process tree's CPU priority to ``nice`` inside :meth:`boosted`; outside,
    after :meth:`to_background`, run it at ``background``.

    ``nice`` None: no boost of its own. The normal value is the process's own when the boost
    is made.
    """

    def __init__(
        self,
        nice: int | None,
        root: int | None = None,
        proc: Path = _PROC,
        *,
        background: int | None = None,
    ) -> None:
        self._nice = nice
        self._root = root if root is not None else os.getpid()
        self._proc = proc
        self._normal = os.getpriority(os.PRIO_PROCESS, 0)
        self._group = proc / str(self._root) / "autogroup"
        self._group_normal = autogroup_nice(self._group)
        self._background = background
        # The tree's nice and its group's outside a boost: normal until to_background.
        self._rest = self._normal
        self._group_rest = self._group_normal
        self.enabled = nice is not None and nice < self._normal

    @property
    def in_background(self) -> bool:
        return self._rest > self._normal

    def _target(self) -> int | None:
        """The nice inside :meth:`boosted`; None: nothing to change."""
        if self.enabled and self._nice is not None:
            return self._nice
        return self._normal if self.in_background else None

    def _set(self, value: int, group: int | None) -> None:
        """Set every thread of the tree to ``value`` and the session's scheduling group to
        ``group`` (None: leave it)."""
        if group is not None:
            try:
                self._group.write_text(f"{group}\n")
            except PermissionError:
                raise
            except OSError:  # e.g. a read-only /proc: threads only from now on
                self._group_normal = self._group_rest = None
        for tid in threads_of(process_tree(self._root, self._proc), self._proc):
            try:
                os.setpriority(os.PRIO_PROCESS, tid, value)
            except ProcessLookupError:  # the thread ended meanwhile
                continue

    def to_background(self) -> bool:
        """Move the tree and its scheduling group to the background nice for good, where
        the priority can be raised again for a boost; True if it moved."""
        background = self._background
        if background is None or background <= self._normal or self.in_background:
            return False
        if not can_come_back(background, self._normal):
            log.info(
                "maintenance stays at normal CPU priority: a raised nice value could not be "
                "lowered again for a lease the writer waits for (needs CAP_SYS_NICE or "
                "RLIMIT_NICE)",
                extra={"background_nice": background},
            )
            return False
        group = None if self._group_normal is None else background
        self._set(background, group)
        self._rest, self._group_rest = background, group
        log.info("maintenance runs at background CPU priority", extra={"nice": background})
        return True

    @contextmanager
    def foreground(self) -> Iterator[None]:
        """The tree and its scheduling group at their normal priority inside, in the
        background again after (a boost inside comes back to normal); nothing changes where
        the tree is not in the background."""
        if not self.in_background:
            yield
            return
        rest, group_rest = self._rest, self._group_rest
        group = None if group_rest is None else self._group_normal
        try:
            self._set(self._normal, group)
        except PermissionError:  # to_background tried the round trip; a limit changed since
            log.warning("could not bring maintenance to normal CPU priority", exc_info=True)
            self._set(rest, None)
            yield
            return
        self._rest, self._group_rest = self._normal, group
        try:
            yield
        finally:
            self._rest, self._group_rest = rest, group_rest
            self._set(rest, group_rest)

    @contextmanager
    def boosted(self) -> Iterator[None]:
        """The process tree at the raised priority inside, at its resting one after."""
        target = self._target()
        if target is None:
            yield
            return
        group = None if self._group_normal is None else target
        try:
            self._set(target, group)
        except PermissionError:
            self.enabled = False
            self._set(self._rest, None)  # threads set before the refusal go back
            log.info(
                "no permission to raise the maintainer's CPU priority during compaction "
                "leases (needs CAP_SYS_NICE); continuing without",
                extra={"nice": target},
            )
            yield
            return
        try:
            yield
        finally:
            self._set(self._rest, self._group_rest)
