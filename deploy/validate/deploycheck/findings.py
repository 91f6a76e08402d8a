"""What a check reports: problems (each naming its file) and checks skipped for a missing tool."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """One thing wrong, in one file: printed as ``<path>: <message>``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ToolMissing(Exception):
    """A command-line tool a check needs is not installed; ``str()`` says how to get it."""


@dataclass
class Context:
    """The repository to check and how to treat missing tools.

    With ``require_tools`` (the default in CI, where the environment has ``CI`` set), a missing
    tool is a problem; otherwise the check that needs it is skipped with a message.
    """

    root: Path
    require_tools: bool = False
    skipped: list[str] = field(default_factory=list)

    def path(self, relative: str) -> Path:
        return self.root / relative

    def rel(self, path: Path) -> str:
        """``path`` relative to the repository root, for messages."""
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path)

    def tool(self, name: str, env_var: str, install_hint: str) -> str:
        """The executable for ``name``: ``$env_var`` if set, else the one on PATH.

        Raises ToolMissing (with ``install_hint``) when there is none.
        """
        candidate = os.environ.get(env_var) or shutil.which(name)
        if not candidate or not Path(candidate).exists():
            raise ToolMissing(f"{name} not found (set {env_var} or install it: {install_hint})")
        return candidate

    def missing(self, check: str, exc: ToolMissing, path: str) -> list[Problem]:
        """Record a skipped check, or return it as a problem when tools are required."""
        if self.require_tools:
            return [Problem(path, f"{check}: {exc}")]
        self.skipped.append(f"{check} skipped: {exc}")
        return []


def ci_requires_tools() -> bool:
    """True when running in CI (``CI`` set to anything but empty, 0 or false)."""
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}
