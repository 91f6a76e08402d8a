"""The demo's PostgreSQL: Debian's server binaries running a cluster of our own.

The cluster lives in ``<state_dir>/postgres`` (``data/``, ``run/`` for the unix socket,
``postgres.log``), listens on ``127.0.0.1:<postgres_port>`` only, trusts local connections,
and runs with ``wal_level=logical`` so Debezium can read it through ``pgoutput``.
PostgreSQL refuses to run as root; started by root (CI), it runs as the unprivileged
``postgres_os_user`` (created if missing) and owns its directory.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from icefjord.local.components import Health, port_open
from icefjord.local.settings import LocalSettings
from shared.errors import IcefjordError

INSTALL_HINT = (
    "PostgreSQL is not installed. On Debian/Ubuntu: `sudo apt-get install postgresql-15` "
    "(any version 13+ works; Icefjord starts its own cluster and leaves the system one "
    "alone), or point ICEFJORD_LOCAL_POSTGRES_BIN_DIR at a directory holding initdb and "
    "pg_ctl. Without PostgreSQL, `icefjord demo --source generator` emits the same Debezium "
    "change events straight to Kafka."
)
REQUIRED_BINARIES = ("initdb", "pg_ctl", "postgres", "pg_isready", "psql")
_CONF_INCLUDE = "include_if_exists = 'icefjord.conf'"


class PostgresNotInstalled(IcefjordError, RuntimeError):
    """No PostgreSQL server binaries were found; the message says how to install them."""


class PostgresError(IcefjordError, RuntimeError):
    """The cluster could not be created, started or reached; the message says why."""


def find_bin_dir(configured: Path | None) -> Path:
    """The directory holding the server binaries: ``configured`` (then nothing else), else
    the newest ``/usr/lib/postgresql/<major>/bin`` (Debian's layout), else the one ``pg_ctl``
    on PATH resolves to. Raises :class:`PostgresNotInstalled`."""
    if configured is not None:
        directory = configured.expanduser()
        if all((directory / name).is_file() for name in REQUIRED_BINARIES):
            return directory
        raise PostgresNotInstalled(
            f"{directory} lacks one of {', '.join(REQUIRED_BINARIES)}. {INSTALL_HINT}"
        )
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    on_path = shutil.which("pg_ctl")
    if on_path is not None:
        candidates.append(Path(on_path).resolve().parent)
    for candidate in candidates:
        if all((candidate / name).is_file() for name in REQUIRED_BINARIES):
            return candidate
    raise PostgresNotInstalled(INSTALL_HINT)


def server_config(settings: LocalSettings, socket_dir: Path) -> str:
    """The settings Icefjord adds to ``postgresql.conf`` (as ``icefjord.conf``)."""
    lines = [
        f"listen_addresses = '{settings.host}'",
        f"port = {settings.postgres_port}",
        f"unix_socket_directories = '{socket_dir}'",
        "wal_level = logical",
        "max_replication_slots = 10",
        "max_wal_senders = 10",
        "max_connections = 50",
        "shared_buffers = 64MB",
        # The demo waits for each table's last commit to reach Iceberg: its commit time is
        # what Debezium reports as source.ts_ms and the writer as its watermark.
        "track_commit_timestamp = on",
        "timezone = 'UTC'",
        "log_timezone = 'UTC'",
        "lc_monetary = 'C'",
        "",
    ]
    return "\n".join(lines)


class PostgresCluster:
    """One PostgreSQL cluster in the state directory, started and stopped with ``pg_ctl``."""

    name = "postgres"

    def __init__(self, settings: LocalSettings) -> None:
        self.settings = settings
        self.home = settings.postgres_home
        self.data = self.home / "data"
        self.socket_dir = self.home / "run"
        self.log_file = self.home / "postgres.log"

    # -- addresses -------------------------------------------------------------------------

    def address(self) -> str:
        s = self.settings
        return f"postgresql://{s.postgres_user}@{s.host}:{s.postgres_port}/{s.postgres_database}"

    def conninfo(self, dbname: str | None = None) -> str:
        """A libpq connection string (TCP, trust authentication)."""
        s = self.settings
        database = dbname or s.postgres_database
        return f"host={s.host} port={s.postgres_port} user={s.postgres_user} dbname={database}"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Create the cluster if missing, (re)write its settings, start it and wait until it
        accepts connections, then create the database. Raises :class:`PostgresNotInstalled`
        or :class:`PostgresError`."""
        bin_dir = find_bin_dir(self.settings.postgres_bin_dir)
        self.home.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        owner = self._os_user()
        if owner is not None:
            self._hand_over(owner)
        if not (self.data / "PG_VERSION").exists():
            self._server(
                bin_dir,
                "initdb",
                "-D",
                str(self.data),
                "-U",
                self.settings.postgres_user,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
            )
            with (self.data / "postgresql.conf").open("a") as main_conf:
                main_conf.write(f"\n{_CONF_INCLUDE}\n")
        conf = self.data / "icefjord.conf"
        conf.write_text(server_config(self.settings, self.socket_dir))
        if owner is not None:
            account = pwd.getpwnam(owner)
            os.chown(conf, account.pw_uid, account.pw_gid)
        if self._running(bin_dir):
            self._server(bin_dir, "pg_ctl", "-D", str(self.data), "reload")
        else:
            if port_open(self.settings.host, self.settings.postgres_port):
                raise PostgresError(
                    f"port {self.settings.postgres_port} on {self.settings.host} is taken by "
                    "another process; set ICEFJORD_LOCAL_POSTGRES_PORT"
                )
            self._server(
                bin_dir,
                "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                str(int(self.settings.start_timeout_s)),
                "start",
            )
        self._ensure_database(bin_dir)

    def stop(self) -> bool:
        """Fast shutdown (open sessions, Debezium's included, are disconnected); True if the
        cluster was running."""
        try:
            bin_dir = find_bin_dir(self.settings.postgres_bin_dir)
        except PostgresNotInstalled:
            return False
        if not (self.data / "PG_VERSION").exists() or not self._running(bin_dir):
            return False
        self._server(bin_dir, "pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        return True

    def running(self) -> bool:
        """True when this cluster's postmaster runs (pg_ctl status)."""
        try:
            bin_dir = find_bin_dir(self.settings.postgres_bin_dir)
        except PostgresNotInstalled:
            return False
        return (self.data / "PG_VERSION").exists() and self._running(bin_dir)

    def check(self) -> Health:
        """Healthy when the server answers a query and runs with ``wal_level=logical``."""
        try:
            bin_dir = find_bin_dir(self.settings.postgres_bin_dir)
        except PostgresNotInstalled:
            return Health(self.name, self.address(), False, "stopped (not installed)")
        if not (self.data / "PG_VERSION").exists():
            return Health(self.name, self.address(), False, "stopped (no cluster yet)")
        ready = subprocess.run(
            [
                str(bin_dir / "pg_isready"),
                "-h",
                self.settings.host,
                "-p",
                str(self.settings.postgres_port),
                "-U",
                self.settings.postgres_user,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if ready.returncode != 0:
            running = self._running(bin_dir)
            return Health(self.name, self.address(), False, "starting" if running else "stopped")
        try:
            (line,) = self.query(
                bin_dir,
                "SELECT current_setting('server_version') || '|' || current_setting('wal_level')",
            )
        except (PostgresError, ValueError) as exc:
            return Health(self.name, self.address(), False, f"unreachable: {exc}")
        version, _, wal_level = line.partition("|")
        healthy = wal_level == "logical"
        return Health(
            self.name, self.address(), healthy, f"PostgreSQL {version}, wal_level={wal_level}"
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except (FileNotFoundError, PermissionError):
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def query(self, bin_dir: Path, sql: str, dbname: str = "postgres") -> list[str]:
        """Run ``sql`` with psql; return the output lines (unaligned, tuples only)."""
        result = subprocess.run(
            [
                str(bin_dir / "psql"),
                "-X",
                "-q",
                "-t",
                "-A",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                self.settings.host,
                "-p",
                str(self.settings.postgres_port),
                "-U",
                self.settings.postgres_user,
                "-d",
                dbname,
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise PostgresError(result.stderr.strip() or f"psql exited {result.returncode}")
        return [line for line in result.stdout.splitlines() if line]

    # -- internals -------------------------------------------------------------------------

    def ensure_database(self, database: str) -> None:
        """Create ``database`` in the running cluster if it is missing (the Iceberg
        catalog's, beside the demo's source database)."""
        self._ensure_database(find_bin_dir(self.settings.postgres_bin_dir), database)

    def _ensure_database(self, bin_dir: Path, database: str | None = None) -> None:
        database = database or self.settings.postgres_database
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", database):
            raise PostgresError(f"database name {database!r}: use lower-case letters, digits, _")
        rows = self.query(bin_dir, f"SELECT 1 FROM pg_database WHERE datname = '{database}'")
        if not rows:
            self.query(bin_dir, f"CREATE DATABASE {database}")

    def _running(self, bin_dir: Path) -> bool:
        status = subprocess.run(
            self._as_owner([str(bin_dir / "pg_ctl"), "-D", str(self.data), "status"]),
            capture_output=True,
            text=True,
            check=False,
        )
        return status.returncode == 0

    def _server(self, bin_dir: Path, program: str, *args: str) -> None:
        command = self._as_owner([str(bin_dir / program), *args])
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise PostgresError(
                f"{program} {' '.join(args[-1:])} failed ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()}\n--- log tail ---\n{self.log_tail()}"
            )

    def _os_user(self) -> str | None:
        """The account the server runs as, or None to run as ourselves (not root)."""
        if os.geteuid() != 0:
            return None
        return self.settings.postgres_os_user

    def _as_owner(self, command: Sequence[str]) -> list[str]:
        owner = self._os_user()
        if owner is None:
            return list(command)
        runuser = shutil.which("runuser")
        if runuser is None:
            raise PostgresError("running as root needs `runuser` (util-linux) to drop to a user")
        return [runuser, "-u", owner, "--", *command]

    def _hand_over(self, owner: str) -> None:
        """Create ``owner`` if missing and give it the cluster's home (root only)."""
        try:
            account = pwd.getpwnam(owner)
        except KeyError:
            useradd = shutil.which("useradd")
            if useradd is None:
                raise PostgresError(
                    f"user {owner!r} is missing and useradd is not available"
                ) from None
            subprocess.run(
                [
                    useradd,
                    "--system",
                    "--user-group",
                    "--no-create-home",
                    "--home-dir",
                    "/nonexistent",
                    "--shell",
                    "/usr/sbin/nologin",
                    owner,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            account = pwd.getpwnam(owner)
        for path in [self.home, *self.home.rglob("*")]:
            os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
        os.chmod(self.home, 0o700)
        probe = subprocess.run(
            self._as_owner(["test", "-w", str(self.home)]), capture_output=True, check=False
        )
        if probe.returncode != 0:
            raise PostgresError(
                f"user {owner!r} cannot reach {self.home} (a parent directory is closed to "
                "other users); set ICEFJORD_LOCAL_POSTGRES_DIR to a directory under a path "
                "it can traverse, e.g. /var/tmp/icefjord-postgres"
            )
