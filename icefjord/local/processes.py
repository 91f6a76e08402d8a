"""Background processes the local stack owns: started detached, tracked by pid file."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ManagedProcess:
    """One long-running process, with its pid file and log file under ``run_dir``."""

    name: str
    run_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.run_dir / f"{self.name}.log"

    def pid(self) -> int | None:
        """The recorded pid if that process is still alive, else None."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        if _is_zombie(pid):
            return None
        return pid

    def start(
        self,
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> int:
        """Start detached (own session, so it outlives this CLI) in ``cwd`` (default: this
        process's); return the pid."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"\n=== starting {self.name} at {time.ctime()} ===\n".encode())
            log.flush()
            proc = subprocess.Popen(
                list(command),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                cwd=cwd,
                start_new_session=True,
            )
        self.pid_file.write_text(str(proc.pid))
        return proc.pid

    def stop(self, timeout: float = 30.0, leader_first: bool = False) -> bool:
        """SIGTERM the process group (``leader_first``: only its leader), wait up to
        ``timeout`` for the leader to exit, then SIGKILL what is left of the group; True if
        one was running.

        ``leader_first`` is for a service whose children it shuts down itself, as a
        container's entry point would be stopped: a pyspark service stops its Spark JVM on
        SIGTERM, and a JVM signalled at the same moment dies under the service's last calls.
        """
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        if leader_first:
            _signal_leader(pid, signal.SIGTERM)
        else:
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pid() is not None:
            time.sleep(0.2)
        if leader_first:
            # The leader's children (its JVM) follow it out; what is left after a moment
            # is killed with the group.
            settle = min(deadline, time.monotonic() + 5.0)
            while time.monotonic() < settle and _group_alive(pid):
                time.sleep(0.2)
        if self.pid() is not None or (leader_first and _group_alive(pid)):
            _signal_group(pid, signal.SIGKILL)
            time.sleep(0.5)
        self.pid_file.unlink(missing_ok=True)
        return True

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` of the log, for error messages."""
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _group_alive(group: int) -> bool:
    """Whether a process of process group ``group`` still runs (zombies, e.g. a leader this
    process has not reaped yet, do not count). Without ``/proc``: whether any is there."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue  # exited while listed
        # After the name: state, ppid, pgrp.
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            return True
    return False


def _signal_leader(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, sig)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"
