"""Stopping the local stack's processes: the whole group, or its leader first."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from icefjord.local.processes import ManagedProcess

pytestmark = pytest.mark.unit

# A leader that, on SIGTERM, waits for its child to see no signal, notes its own clean exit
# and exits; its child (the stand-in for a Spark JVM) notes a SIGTERM if it gets one.
LEADER = """
import signal, subprocess, sys, time
from pathlib import Path
out = Path(sys.argv[1])
child = subprocess.Popen([sys.executable, "-c", '''
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: (out.joinpath("child-got-sigterm").touch(), sys.exit(0)))
out.joinpath("child-ready").touch()
while True:
    time.sleep(0.1)
''', str(out)])
def stop(*_):
    time.sleep(0.5)
    out.joinpath("leader-stopped-cleanly").touch()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(0.1)
"""


def _started(tmp_path: Path) -> ManagedProcess:
    process = ManagedProcess("svc", tmp_path / "run")
    process.start([sys.executable, "-c", LEADER, str(tmp_path)])
    deadline = time.monotonic() + 20
    while not (tmp_path / "child-ready").exists():
        assert time.monotonic() < deadline, process.tail()
        time.sleep(0.05)
    return process


def _group_gone(group: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if fields[2] == str(group) and fields[0] != "Z":
            return False
    return True


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="no /proc (not Linux)")
def test_leader_first_stop_lets_the_leader_stop_its_child(tmp_path: Path) -> None:
    process = _started(tmp_path)
    group = process.pid()
    assert group is not None
    assert process.stop(timeout=10, leader_first=True)
    assert (tmp_path / "leader-stopped-cleanly").exists()
    assert not (tmp_path / "child-got-sigterm").exists()
    # The child the leader left behind was killed with the group.
    assert _group_gone(group)
    assert process.pid() is None and not process.pid_file.exists()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="no /proc (not Linux)")
def test_group_stop_signals_every_member(tmp_path: Path) -> None:
    process = _started(tmp_path)
    group = process.pid()
    assert group is not None
    assert process.stop(timeout=10)
    assert (tmp_path / "child-got-sigterm").exists()
    assert (tmp_path / "leader-stopped-cleanly").exists()
    deadline = time.monotonic() + 5
    while not _group_gone(group):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert not process.stop()


def test_down_stops_an_s3_server_started_under_the_other_store(tmp_path: Path) -> None:
    """``bench --stores`` leaves the stack on disk settings; ``down`` still stops its S3."""
    from icefjord.local.settings import LocalSettings
    from icefjord.local.stack import LocalStack

    settings = LocalSettings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    s3 = ManagedProcess("s3", settings.state / "run")
    s3.start([sys.executable, "-c", "import time; time.sleep(60)"])
    assert s3.pid() is not None
    assert "s3" in LocalStack(settings).down()
    assert s3.pid() is None
