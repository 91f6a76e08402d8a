"""The mypyc build (``make compiled``) for the local stack, used only while fresh.

``make compiled`` installs the whole wheel (every package; the normalizer's per-record modules
and the shared Avro decoder compiled) into ``<state_dir>/compiled``. The local stack runs the
normalizer and the writer from there when that copy is *fresh*: every source file of the
packages they import is present in the build byte for byte, and every source file the build
holds still exists unchanged. A checkout edited after the build is never hidden behind an old
build: it runs plain CPython, and the reason is logged. No stamp file to forget: the wheel
carries its own sources.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# What the compiled services import; the wheel carries these files (package data too).
PACKAGES = ("services", "shared", "contracts")
SOURCE_SUFFIXES = frozenset({".py", ".avsc", ".json", ".toml", ".yaml", ".xml", ".properties"})
# One per-record module that must be an extension module, or the build is not compiled.
COMPILED_PROBE = Path("services", "cdc_normalizer", "normalize")
_REBUILD = "(make compiled)"


@dataclass(frozen=True, slots=True)
class CompiledBuild:
    """Whether the build at ``path`` may run: ``fresh``, else ``reason`` says why not."""

    path: Path
    fresh: bool
    reason: str


def checkout_root() -> Path:
    """The directory holding the ``services`` package this interpreter imports."""
    spec = importlib.util.find_spec("services")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the services package is not importable")
    return Path(next(iter(spec.submodule_search_locations))).resolve().parent


def _sources(root: Path) -> Iterator[Path]:
    """Source files of :data:`PACKAGES` under ``root``, relative to it."""
    for package in PACKAGES:
        base = root / package
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            wanted = path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts
            if wanted and path.is_file():
                yield path.relative_to(root)


def compiled_build(build: Path, checkout: Path) -> CompiledBuild:
    """Compare the build at ``build`` with the sources at ``checkout``."""
    if not (build / "services" / "cdc_normalizer").is_dir():
        return CompiledBuild(build, False, f"no build in {build} (make compiled)")
    probe = build / COMPILED_PROBE
    if not any(probe.parent.glob(f"{probe.name}.*.so")):
        return CompiledBuild(build, False, f"{build} holds no compiled {COMPILED_PROBE}")
    for relative in _sources(checkout):
        copy = build / relative
        if not copy.is_file():
            return CompiledBuild(build, False, f"{relative} is not in the build {_REBUILD}")
        if copy.read_bytes() != (checkout / relative).read_bytes():
            return CompiledBuild(build, False, f"{relative} changed since the build {_REBUILD}")
    for relative in _sources(build):
        if not (checkout / relative).is_file():
            return CompiledBuild(build, False, f"{relative} is gone from the checkout")
    return CompiledBuild(build, True, "compiled with mypyc")
