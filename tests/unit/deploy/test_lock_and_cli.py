"""The image lock generator and the validator's command line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
from deploycheck.__main__ import main

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def lock() -> ModuleType:
    spec = importlib.util.spec_from_file_location("icefjord_lock", ROOT / "deploy/docker/lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_closure_pins_installed_versions_with_transitive_dependencies(lock: ModuleType) -> None:
    pins = lock.closure(["pydantic-settings"])
    for name in ("pydantic-settings", "pydantic", "pydantic-core", "python-dotenv"):
        assert pins[name] == metadata.version(name)


def test_closure_follows_requested_extras_only(lock: ModuleType) -> None:
    assert "sqlalchemy" not in lock.closure(["pyiceberg"])
    assert "sqlalchemy" in lock.closure(["pyiceberg[sql-sqlite]"])


def test_closure_of_the_project_holds_every_pyproject_pin(lock: ModuleType) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = lock.closure(project["dependencies"])
    for requirement in project["dependencies"]:
        name, version = requirement.split("==")
        assert pins[name.split("[")[0].lower()] == version


def test_the_import_graph_follows_project_modules_and_skips_type_checking_blocks(
    lock: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "services" / "svc").mkdir(parents=True)
    (tmp_path / "shared").mkdir()
    (tmp_path / "services" / "__init__.py").write_text("")
    (tmp_path / "shared" / "__init__.py").write_text("")
    (tmp_path / "services" / "svc" / "__init__.py").write_text("")
    (tmp_path / "services" / "svc" / "main.py").write_text(
        "import json\nfrom typing import TYPE_CHECKING\nfrom . import helper\n"
        "if TYPE_CHECKING:\n    import pyspark\n"
        "def run() -> None:\n    import numpy\n"
    )
    (tmp_path / "services" / "svc" / "helper.py").write_text("from shared import codec\n")
    (tmp_path / "shared" / "codec.py").write_text("import fastavro.read\n")
    (tmp_path / "shared" / "unused.py").write_text("import pyarrow\n")
    monkeypatch.setattr(lock, "ROOT", tmp_path)
    found = lock.imports_of("services.svc")
    assert found.external == {"numpy", "fastavro"}
    assert "shared.codec" in found.modules and "shared.unused" not in found.modules
    assert lock._kept(found.modules) == ["services.svc", "shared"]


def test_the_committed_image_locks_are_current(lock: ModuleType) -> None:
    for image in lock.IMAGES:
        assert (lock.LOCKS / f"{image}.txt").read_text() == lock.render(image), image


def test_cli_reports_problems_as_file_and_message(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = repo / "deploy/compose.env.example"
    example.write_text(example.read_text().replace("ICEFJORD_VERSION=0.1.0\n", ""))
    assert main(["compose", "--root", str(repo)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "deploy/compose.env.example: ICEFJORD_VERSION is used by docker-compose.yml but not listed",
        "deploycheck: 1 checks, 1 problems, 0 skipped",
    ]


def test_cli_skips_a_missing_tool_unless_tools_are_required(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROMTOOL", raising=False)
    command = [sys.executable, "-m", "deploycheck", "prometheus", "--root", str(repo)]
    env = {"PATH": str(tmp_path), "PYTHONPATH": str(ROOT / "deploy/validate")}
    relaxed = subprocess.run(
        [*command, "--no-require-tools"], env=env, capture_output=True, text=True, check=False
    )
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    assert "SKIPPED promtool skipped: promtool not found" in relaxed.stdout
    strict = subprocess.run(
        command, env={**env, "CI": "true"}, capture_output=True, text=True, check=False
    )
    assert strict.returncode == 1
    assert strict.stdout.startswith("deploy/prometheus/rules: promtool: promtool not found")
