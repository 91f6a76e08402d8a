"""The maintainer's CPU priority boost during a compaction lease (priority.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.maintainer.priority import LeaseBoost, autogroup_nice, process_tree, threads_of

pytestmark = pytest.mark.unit


def fake_proc(root: Path, processes: dict[int, tuple[str, int, list[int]]]) -> Path:
    """A /proc with ``pid: (command name, parent pid, thread ids)``."""
    for pid, (name, parent, tids) in processes.items():
        task = root / str(pid) / "task"
        task.mkdir(parents=True)
        for tid in tids:
            (task / str(tid)).mkdir()
        (root / str(pid) / "stat").write_text(f"{pid} ({name}) S {parent} {pid} {pid} 0 -1\n")
    (root / "self").mkdir()  # not a pid: skipped
    return root


def test_the_tree_is_the_root_and_every_descendant_whatever_their_names(tmp_path: Path) -> None:
    proc = fake_proc(
        tmp_path,
        {
            1: ("init", 0, [1]),
            10: ("python", 1, [10, 11]),
            20: ("java) S 1 (odd", 10, [20, 21, 22]),  # a name with ") " in it
            30: ("bash", 20, [30]),
            40: ("other", 1, [40]),
        },
    )
    assert sorted(process_tree(10, proc)) == [10, 20, 30]
    assert sorted(threads_of([10, 20, 30, 99], proc)) == [10, 11, 20, 21, 22, 30]


def thread_nices(pid: int) -> list[int]:
    return [
        os.getpriority(os.PRIO_PROCESS, int(tid.name))
        for tid in Path(f"/proc/{pid}/task").iterdir()
    ]


def test_a_boost_raises_every_thread_of_the_tree_and_puts_it_back() -> None:
    # A child with a second thread and a grandchild: the shape of the service and its JVM.
    script = (
        "import subprocess, sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(g.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    # A session of its own, as the local stack starts each service: its scheduling group.
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    grandchild = 0
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        normal = os.getpriority(os.PRIO_PROCESS, 0)
        boost = LeaseBoost(normal - 5, root=child.pid)
        assert boost.enabled
        group = Path(f"/proc/{child.pid}/autogroup")
        group_normal = autogroup_nice(group)
        with boost.boosted():
            inside = thread_nices(child.pid) + thread_nices(grandchild)
            group_inside = autogroup_nice(group)
        after = thread_nices(child.pid) + thread_nices(grandchild)
        assert len(inside) >= 3
        if os.geteuid() == 0:
            assert set(inside) == {normal - 5}
            if group_normal is not None:
                assert group_inside == normal - 5
        else:  # no CAP_SYS_NICE: refused once, then off, and nothing changed
            assert set(inside) == {normal}
            assert group_inside == group_normal
            assert not boost.enabled
        assert set(after) == {normal}
        assert autogroup_nice(group) == group_normal
    finally:
        if grandchild:
            os.kill(grandchild, 9)
        child.kill()
        child.wait()


def test_the_scheduling_group_nice_is_read_from_proc(tmp_path: Path) -> None:
    (tmp_path / "autogroup").write_text("/autogroup-4495 nice -3\n")
    (tmp_path / "odd").write_text("something else\n")
    assert autogroup_nice(tmp_path / "autogroup") == -3
    assert autogroup_nice(tmp_path / "odd") is None
    assert autogroup_nice(tmp_path / "missing") is None


def test_no_boost_when_off_or_not_higher_than_normal() -> None:
    normal = os.getpriority(os.PRIO_PROCESS, 0)
    assert not LeaseBoost(None).enabled
    assert not LeaseBoost(normal).enabled
    with LeaseBoost(None).boosted():
        assert os.getpriority(os.PRIO_PROCESS, 0) == normal
