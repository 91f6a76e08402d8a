"""Fixtures for the deployment tests: the validator package, a mutable copy of the repository's
deployment files, and tools that must exist in CI.

The validator lives in deploy/validate/deploycheck (not an installed package); it is put on
``sys.path`` here. Tests that mutate files work on a copy under ``tmp_path``, never on the tree.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "deploy" / "validate"))

from deploycheck.contract import Contract, load_contract  # noqa: E402
from deploycheck.findings import Context, ToolMissing, ci_requires_tools  # noqa: E402
from deploycheck.kubernetes import renderer  # noqa: E402

# What a repository copy needs for every check: the deployment files and what the Dockerfiles
# copy (deploy/local/target is a Maven build folder).
COPIED = (
    "docker-compose.yml",
    "pyproject.toml",
    "setup.py",
    "README.md",
    ".gitignore",
    ".dockerignore",
    "deploy",
    "contracts",
    "shared",
    "services",
    "icefjord",
)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def contract() -> Contract:
    return load_contract(ROOT)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of the deployment files to break on purpose."""
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(
                source, tmp_path / name, ignore=shutil.ignore_patterns("target", "__pycache__")
            )
        else:
            shutil.copy2(source, tmp_path / name)
    return tmp_path


@pytest.fixture
def ctx(repo: Path) -> Context:
    """A validator context on the copy; missing tools are problems, as in CI."""
    return Context(root=repo, require_tools=True)


@pytest.fixture
def edit(repo: Path) -> Callable[[str, str, str], None]:
    """Replace exactly one occurrence of ``old`` by ``new`` in a copied file."""

    def _edit(relative: str, old: str, new: str) -> None:
        path = repo / relative
        text = path.read_text()
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {relative}"
        path.write_text(text.replace(old, new))

    return _edit


def need_tool(name: str, env_var: str) -> str:
    """The tool's path; skips the test when it is missing, except in CI where that fails."""
    found = os.environ.get(env_var) or shutil.which(name)
    if found:
        return found
    message = f"{name} is not installed (deploy/README.md, 'Validation', lists the tools)"
    if ci_requires_tools():
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def kubectl() -> list[str]:
    """The overlay renderer: `kubectl kustomize`, or `kustomize build` where only that exists."""
    try:
        return renderer(Context(ROOT))
    except ToolMissing as exc:
        if ci_requires_tools():
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def promtool() -> str:
    return need_tool("promtool", "PROMTOOL")


@pytest.fixture(scope="session")
def shellcheck() -> str:
    return need_tool("shellcheck", "SHELLCHECK")
