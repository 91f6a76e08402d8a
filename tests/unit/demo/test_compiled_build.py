"""The local stack runs the normalizer's mypyc build only while it matches the sources."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from icefjord.local import services as local_services
from icefjord.local.compiled import checkout_root, compiled_build
from icefjord.local.services import service_processes
from icefjord.local.settings import LocalSettings

pytestmark = pytest.mark.unit

EXTENSION = "normalize.cpython-311-x86_64-linux-gnu.so"


def make_checkout(root: Path) -> Path:
    files = {
        "services/__init__.py": "",
        "services/cdc_normalizer/__init__.py": "",
        "services/cdc_normalizer/normalize.py": "def normalize() -> None: ...\n",
        "shared/kafka.py": "TIMEOUT = 10\n",
        "contracts/avro/change.avsc": '{"type": "record"}\n',
        "contracts/topics.toml": "[changes]\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def make_build(checkout: Path, build: Path) -> Path:
    """What ``make compiled`` leaves: the packages' sources plus the extension modules."""
    for package in ("services", "shared", "contracts"):
        shutil.copytree(checkout / package, build / package)
    (build / "services" / "cdc_normalizer" / EXTENSION).write_bytes(b"\x7fELF")
    (build / "icefjord-0.1.0.dist-info").mkdir()
    return build


def test_a_build_of_the_same_sources_is_fresh(tmp_path: Path) -> None:
    checkout = make_checkout(tmp_path / "checkout")
    build = compiled_build(make_build(checkout, tmp_path / "build"), checkout)
    assert build.fresh, build.reason


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda c: (c / "shared/kafka.py").write_text("TIMEOUT = 45\n"), "shared/kafka.py"),
        (lambda c: (c / "shared/retry.py").write_text("N = 3\n"), "shared/retry.py"),
        (lambda c: (c / "contracts/avro/change.avsc").write_text("{}"), "change.avsc"),
        (lambda c: (c / "contracts/topics.toml").unlink(), "contracts/topics.toml"),
    ],
    ids=["changed", "added", "schema changed", "removed"],
)
def test_an_edit_after_the_build_makes_it_stale_and_says_which_file(
    tmp_path: Path, edit: object, named: str
) -> None:
    checkout = make_checkout(tmp_path / "checkout")
    path = make_build(checkout, tmp_path / "build")
    assert callable(edit)
    edit(checkout)
    build = compiled_build(path, checkout)
    assert not build.fresh
    assert named in build.reason


def test_a_build_without_extension_modules_or_no_build_at_all_is_not_used(
    tmp_path: Path,
) -> None:
    checkout = make_checkout(tmp_path / "checkout")
    assert "no build" in compiled_build(tmp_path / "missing", checkout).reason
    path = make_build(checkout, tmp_path / "build")
    (path / "services" / "cdc_normalizer" / EXTENSION).unlink()
    build = compiled_build(path, checkout)
    assert not build.fresh
    assert "no compiled" in build.reason


def test_checkout_root_is_the_directory_holding_the_imported_services() -> None:
    assert (checkout_root() / "services" / "cdc_normalizer" / "normalize.py").is_file()


def local_settings(tmp_path: Path, compiled: bool = True) -> LocalSettings:
    return LocalSettings(
        state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", compiled_services=compiled
    )


def stack_with_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, LocalSettings]:
    """A checkout the local stack takes for its own, and a fresh build of it in the state."""
    checkout = make_checkout(tmp_path / "checkout")
    settings = local_settings(tmp_path)
    make_build(checkout, settings.state / "compiled")
    monkeypatch.setattr(local_services, "checkout_root", lambda: checkout)
    return checkout, settings


def test_the_normalizer_and_the_writer_run_from_a_fresh_build_and_only_they(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, settings = stack_with_build(tmp_path, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", "/opt/extra")
    normalizer, watcher, writer, maintainer = service_processes(
        settings, ["normalizer", "watcher", "writer", "maintainer"]
    )
    build = settings.state / "compiled"
    for compiled in (normalizer, writer):
        assert compiled.env["PYTHONPATH"].split(":") == [str(build), "/opt/extra"]
        # python -m puts the working directory first on sys.path: it must be the build too.
        assert compiled.cwd == build
        assert compiled.build == "compiled with mypyc"
    for plain in (watcher, maintainer):
        assert plain.cwd is None
        assert "PYTHONPATH" not in plain.env


def test_a_stale_build_or_the_setting_off_runs_plain_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout, settings = stack_with_build(tmp_path, monkeypatch)
    (checkout / "shared/kafka.py").write_text("TIMEOUT = 45\n")
    (stale,) = service_processes(settings, ["normalizer"])
    assert stale.cwd is None
    assert "PYTHONPATH" not in stale.env
    assert stale.build == "plain CPython: shared/kafka.py changed since the build (make compiled)"
    (off,) = service_processes(local_settings(tmp_path, compiled=False), ["normalizer"])
    assert off.cwd is None
    assert "off" in off.build
