"""The local stack's S3 server: SeaweedFS, built once from the Go module proxy.

SeaweedFS (Apache-2.0) is one Go program, ``weed``. Its module carries ``replace``
directives, so ``go install module@version`` refuses it: the module is downloaded with
``go mod download``, copied out of the read-only module cache and built there (about 10
CPU minutes on a 2-core machine, once per version; the binary is cached beside the Maven
downloads). ``weed server`` then runs a master, a volume server, a filer and the S3
gateway in one process, every port on loopback, data under ``<state_dir>/s3``; the
credentials reach it in a file, never on its command line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from icefjord.local.components import Health, port_open
from icefjord.local.processes import ManagedProcess
from icefjord.local.settings import LocalSettings
from shared.errors import IcefjordError


class ObjectStoreError(IcefjordError, RuntimeError):
    """SeaweedFS could not be built or did not serve S3; the message says why."""


def free_mib(path: Path) -> int:
    """Free space of the file system holding ``path``, in MiB (what an unprivileged
    process may use)."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize // (1024 * 1024)


def weed_binary(settings: LocalSettings) -> Path:
    """Where the ``weed`` binary of the configured version is kept."""
    return settings.dist_dir / f"seaweedfs-{settings.seaweedfs_version}" / "weed"


def ensure_weed(settings: LocalSettings, progress: Callable[[str], None]) -> Path:
    """The ``weed`` binary, built first if the cache lacks it. Raises ObjectStoreError."""
    binary = weed_binary(settings)
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        raise ObjectStoreError("building SeaweedFS needs Go 1.26+ on PATH (apt: golang-go)")
    module = f"{settings.seaweedfs_module}@{settings.seaweedfs_version}"
    progress(f"downloading {module}")
    downloaded = _go([go, "mod", "download", "-json", module], cwd=None)
    source = Path(json.loads(downloaded)["Dir"])
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=binary.parent, prefix="build-") as scratch:
        work = Path(scratch) / "src"
        shutil.copytree(source, work)  # the module cache is read-only; go build writes
        for root, dirs, _ in os.walk(work):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)
        partial = Path(scratch) / "weed"
        command = [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), "./weed"]
        _with_elapsed(progress, "building SeaweedFS once (about 10 CPU minutes)", command, work)
        partial.replace(binary)
    progress(f"SeaweedFS built: {binary}")
    return binary


def _go(command: list[str], cwd: Path | None) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip()[-2000:]
        raise ObjectStoreError(f"{' '.join(command[:3])} exited {result.returncode}: {tail}")
    return result.stdout


def _with_elapsed(
    progress: Callable[[str], None], what: str, command: list[str], cwd: Path
) -> None:
    """Run ``command``, reporting ``what`` with the elapsed time every 15 s, not its log."""
    done = threading.Event()
    began = time.monotonic()

    def tick() -> None:
        while not done.wait(15.0):
            progress(f"{what}: {time.monotonic() - began:.0f} s")

    progress(what)
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        _go(command, cwd)
    finally:
        done.set()
        ticker.join()


class ObjectStore:
    """SeaweedFS serving S3 on ``s3_port``, with the stack's bucket and credentials."""

    name = "s3"

    def __init__(self, settings: LocalSettings) -> None:
        self.settings = settings
        self.home = settings.state / "s3"
        self.process = ManagedProcess("s3", settings.state / "run")

    def address(self) -> str:
        return f"{self.settings.s3_endpoint}/{self.settings.s3_bucket}"

    def _identities(self) -> Path:
        """The S3 credentials file (mode 600): the one identity the stack's clients use."""
        s = self.settings
        path = self.home / "identities.json"
        identity = {
            "name": s.s3_access_key,
            "credentials": [
                {"accessKey": s.s3_access_key, "secretKey": s.s3_secret_key.get_secret_value()}
            ],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        path.touch(mode=0o600, exist_ok=True)
        path.write_text(json.dumps({"identities": [identity]}))
        return path

    def start(self) -> None:
        """Start ``weed server`` (the binary must be built: :func:`ensure_weed`), create the
        bucket if missing, and wait until an object can be written and read back (the
        bucket's listing comes from the filer before the volume server serves any data).
        Raises ObjectStoreError."""
        s = self.settings
        (self.home / "data").mkdir(parents=True, exist_ok=True)
        free = free_mib(self.home / "data")
        if free < s.s3_min_free_mib:
            raise ObjectStoreError(
                f"{free} MiB free under {self.home}: SeaweedFS would serve read-only below "
                f"{s.s3_min_free_mib} MiB (s3_min_free_mib); free some disk space"
            )
        binary = weed_binary(s)
        if not binary.is_file():
            raise ObjectStoreError(f"{binary} is missing; `icefjord local up` builds it")
        # Every port is named, so a second stack (tests pick free ports) keeps clear of
        # this one. The Iceberg REST and Lance
        # servers that SeaweedFS's S3 gateway can start are off (port 0).
        self.process.start(
            [
                str(binary),
                "server",
                f"-dir={self.home / 'data'}",
                f"-ip={s.host}",
                f"-ip.bind={s.host}",
                f"-master.port={s.s3_master_port}",
                f"-master.port.grpc={s.s3_master_grpc_port}",
                "-master.volumeSizeLimitMB=256",
                f"-volume.port={s.s3_volume_port}",
                f"-volume.port.grpc={s.s3_volume_grpc_port}",
                "-volume.max=0",
                f"-volume.minFreeSpace={s.s3_min_free_mib}MiB",
                "-filer",
                f"-filer.port={s.s3_filer_port}",
                f"-filer.port.grpc={s.s3_filer_grpc_port}",
                "-s3",
                f"-s3.port={s.s3_port}",
                f"-s3.port.grpc={s.s3_grpc_port}",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                f"-s3.config={self._identities()}",
            ]
        )
        deadline = time.monotonic() + s.start_timeout_s
        while True:
            try:
                self._ensure_bucket()
                self._probe_data()
                return
            except OSError as exc:
                if self.process.pid() is None:
                    raise ObjectStoreError(f"weed server exited: {exc}") from exc
                if time.monotonic() > deadline:
                    raise ObjectStoreError(
                        f"S3 not serving after {s.start_timeout_s:.0f}s: {exc}"
                    ) from exc
            time.sleep(0.5)

    def _ensure_bucket(self) -> None:
        from pyarrow import fs

        s3 = s3_filesystem(self.settings, allow_bucket_creation=True)
        if s3.get_file_info(self.settings.s3_bucket).type == fs.FileType.NotFound:
            s3.create_dir(self.settings.s3_bucket)

    def _probe_data(self) -> None:
        """Write a small object and read it back; raises OSError until the data is served."""
        s3 = s3_filesystem(self.settings)
        path = f"{self.settings.s3_bucket}/.icefjord/probe"
        written = str(time.time_ns()).encode()
        with s3.open_output_stream(path) as out:
            out.write(written)
        with s3.open_input_stream(path) as back:
            if back.read() != written:
                raise OSError(f"s3://{path} read back other bytes than written")

    def stop(self) -> bool:
        return self.process.stop()

    def check(self) -> Health:
        s = self.settings
        if not port_open(s.host, s.s3_port):
            running = self.process.pid() is not None
            return Health(self.name, self.address(), False, "starting" if running else "stopped")
        from pyarrow import fs

        try:
            selector = fs.FileSelector(s.s3_bucket, recursive=False)
            entries = s3_filesystem(s).get_file_info(selector)
        except OSError as exc:
            return Health(self.name, self.address(), False, f"bucket unreadable: {exc}")
        free = free_mib(self.home)
        if free < s.s3_min_free_mib:
            return Health(
                self.name,
                self.address(),
                False,
                f"read-only: {free} MiB free, below s3_min_free_mib ({s.s3_min_free_mib})",
            )
        return Health(
            self.name,
            self.address(),
            True,
            f"SeaweedFS S3, bucket with {len(entries)} entries, {free} MiB free",
        )

    def log_tail(self) -> str:
        return self.process.tail()


def s3_filesystem(settings: LocalSettings, *, allow_bucket_creation: bool = False) -> Any:
    """pyarrow's S3 file system on the local S3 server, as the stack's clients see it."""
    from pyarrow import fs

    return fs.S3FileSystem(
        access_key=settings.s3_access_key,
        secret_key=settings.s3_secret_key.get_secret_value(),
        endpoint_override=settings.s3_endpoint,
        region=settings.s3_region,
        scheme="http",
        allow_bucket_creation=allow_bucket_creation,
        connect_timeout=3,
        request_timeout=10,
    )
