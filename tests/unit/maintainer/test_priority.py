"""The maintainer's CPU priority boost during a compaction lease (priority.py)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from services.maintainer.priority import (
    LeaseBoost,
    autogroup_nice,
    can_come_back,
    process_tree,
    threads_of,
)

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


def may_lower_to(nice: int) -> bool:
    """The kernel's rule for lowering a nice value: CAP_SYS_NICE, or an RLIMIT_NICE of at
    least ``20 - nice``."""
    status = Path("/proc/self/status").read_text().splitlines()
    effective = int(next(line.split()[1] for line in status if line.startswith("CapEff:")), 16)
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return bool(effective >> 23 & 1) or soft == resource.RLIM_INFINITY or 20 - nice <= soft


NORMAL = os.getpriority(os.PRIO_PROCESS, 0)
MAY_BOOST = may_lower_to(NORMAL - 5)


def start_service_shape() -> tuple[subprocess.Popen[str], int]:
    """A child in a session of its own, with a second thread and a grandchild."""
    script = (
        "import subprocess, sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(g.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert child.stdout is not None
    return child, int(child.stdout.readline())


@pytest.mark.skipif(not MAY_BOOST, reason="lowering a nice value needs CAP_SYS_NICE")
def test_the_tree_rests_in_the_background_and_a_boost_comes_back_to_it() -> None:
    child, grandchild = start_service_shape()
    try:
        normal = os.getpriority(os.PRIO_PROCESS, 0)
        priority = LeaseBoost(normal - 5, root=child.pid, background=normal + 7)
        group = Path(f"/proc/{child.pid}/autogroup")
        group_normal = autogroup_nice(group)
        assert not priority.in_background
        assert priority.to_background()
        assert priority.in_background
        resting = thread_nices(child.pid) + thread_nices(grandchild)
        assert len(resting) >= 3
        assert set(resting) == {normal + 7}
        if group_normal is not None:
            assert autogroup_nice(group) == normal + 7
        with priority.boosted():
            assert set(thread_nices(child.pid) + thread_nices(grandchild)) == {normal - 5}
            if group_normal is not None:
                assert autogroup_nice(group) == normal - 5
        assert set(thread_nices(child.pid) + thread_nices(grandchild)) == {normal + 7}
        if group_normal is not None:
            assert autogroup_nice(group) == normal + 7
        assert not priority.to_background()  # already there
    finally:
        os.kill(grandchild, 9)
        child.kill()
        child.wait()


def tree_nices(pids: list[int]) -> set[int]:
    return {nice for pid in pids for nice in thread_nices(pid)}


@pytest.mark.skipif(not MAY_BOOST, reason="lowering a nice value needs CAP_SYS_NICE")
def test_an_overdue_rewrite_runs_in_the_foreground_and_its_boost_comes_back_there() -> None:
    child, grandchild = start_service_shape()
    try:
        normal = os.getpriority(os.PRIO_PROCESS, 0)
        priority = LeaseBoost(normal - 5, root=child.pid, background=normal + 7)
        group = Path(f"/proc/{child.pid}/autogroup")
        group_normal = autogroup_nice(group)
        assert priority.to_background()
        tree = [child.pid, grandchild]
        with priority.foreground():
            assert not priority.in_background
            assert tree_nices(tree) == {normal}
            if group_normal is not None:
                assert autogroup_nice(group) == group_normal
            with priority.boosted():
                assert tree_nices(tree) == {normal - 5}
            assert tree_nices(tree) == {normal}
        assert priority.in_background
        assert tree_nices(tree) == {normal + 7}
        if group_normal is not None:
            assert autogroup_nice(group) == normal + 7
    finally:
        os.kill(grandchild, 9)
        child.kill()
        child.wait()


def test_the_foreground_changes_nothing_outside_the_background() -> None:
    normal = os.getpriority(os.PRIO_PROCESS, 0)
    priority = LeaseBoost(None, background=None)
    with priority.foreground():
        assert os.getpriority(os.PRIO_PROCESS, 0) == normal
    assert os.getpriority(os.PRIO_PROCESS, 0) == normal


@pytest.mark.skipif(not MAY_BOOST, reason="lowering a nice value needs CAP_SYS_NICE")
def test_without_a_boost_value_a_lease_in_the_background_runs_at_normal_priority() -> None:
    child, grandchild = start_service_shape()
    try:
        normal = os.getpriority(os.PRIO_PROCESS, 0)
        priority = LeaseBoost(None, root=child.pid, background=normal + 3)
        assert not priority.enabled
        assert priority.to_background()
        with priority.boosted():
            assert set(thread_nices(child.pid)) == {normal}
        assert set(thread_nices(child.pid)) == {normal + 3}
    finally:
        os.kill(grandchild, 9)
        child.kill()
        child.wait()


def test_no_background_when_off_or_not_above_normal() -> None:
    normal = os.getpriority(os.PRIO_PROCESS, 0)
    for background in (None, normal, normal - 1):
        priority = LeaseBoost(None, background=background)
        assert not priority.to_background()
        assert not priority.in_background
    assert os.getpriority(os.PRIO_PROCESS, 0) == normal


def test_coming_back_from_a_raised_nice_is_tried_on_a_thread_of_its_own() -> None:
    normal = os.getpriority(os.PRIO_PROCESS, 0)
    # Raising and lowering to the same value needs nothing; lowering below it needs root.
    assert can_come_back(normal, normal)
    assert can_come_back(min(normal + 5, 19), normal) == may_lower_to(normal)
    assert os.getpriority(os.PRIO_PROCESS, 0) == normal


def test_without_permission_to_come_back_the_tree_stays_at_normal_priority() -> None:
    script = (
        "import os, resource, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from services.maintainer.priority import LeaseBoost\n"
        # A process that may not lower its nice: an RLIMIT_NICE of 0, and no root (which
        # would have CAP_SYS_NICE). Imported first, as the checkout may be root's alone.
        "resource.setrlimit(resource.RLIMIT_NICE, (0, 0))\n"
        "if os.geteuid() == 0:\n"
        "    os.setgid(65534)\n"
        "    os.setuid(65534)\n"
        "p = LeaseBoost(None, background=10)\n"
        "print(p.to_background(), p.in_background, os.getpriority(os.PRIO_PROCESS, 0))\n"
    )
    root = str(Path(__file__).resolve().parents[3])
    out = subprocess.run(
        [sys.executable, "-c", script, root], capture_output=True, text=True, check=True
    )
    normal = os.getpriority(os.PRIO_PROCESS, 0)
    assert out.stdout.split() == ["False", "False", str(normal)]
