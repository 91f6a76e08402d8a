"""Images: static checks of the Dockerfiles (pinned bases, multi-stage, non-root, the contract's
entry point and port), the Python lock against pyproject.toml, the Spark jar pins against the
local stack's, and shellcheck on the deployment scripts."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from deploycheck.contract import Contract, ServiceContract
from deploycheck.findings import Context, Problem, ToolMissing

DOCKER_DIR = "deploy/docker"
LOCKS = "deploy/docker/requirements"
IMAGE_POM = "deploy/docker/spark-jars/pom.xml"
LOCAL_POM = "deploy/local/pom.xml"
SHELL_SCRIPTS = (
    "deploy/docker/*.sh",
    "deploy/docker/base/*.sh",
    "deploy/compose/*.sh",
    "deploy/validate/*.sh",
)
SHELLCHECK_HINT = "apt-get install shellcheck"
SHARED_JAR_PROPERTIES = ("iceberg.version", "sqlite.jdbc.version", "spark.binary")
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;]+)")


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def _image_pinned(reference: str, args: dict[str, str]) -> bool:
    image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), reference)
    if "@sha256:" in image:
        return True
    name_tag = image.rsplit("/", 1)[-1]
    return ":" in name_tag and not name_tag.endswith(":latest") and "$" not in image


def dockerfile_messages(text: str, svc: ServiceContract) -> Iterator[str]:
    """What is wrong with one service's Dockerfile, judged from its text."""
    instructions = _instructions(text)
    args: dict[str, str] = {}
    stages: list[str] = []
    for keyword, rest in instructions:
        if keyword == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name.strip()] = value.strip()
        elif keyword == "FROM":
            words = rest.split()
            image = next(w for w in words if not w.startswith("--"))
            stage = words[-1] if len(words) >= 3 and words[-2].upper() == "AS" else ""
            if image not in stages and not _image_pinned(image, args):
                yield f"FROM {image} (stage {stage or '-'}) is not pinned to a version"
            if stage:
                stages.append(stage)
    if len(stages) < 2:
        yield "not multi-stage (build in one stage, run from a slim one)"
    final = instructions[max(i for i, (k, _) in enumerate(instructions) if k == "FROM") :]
    users = [rest for keyword, rest in final if keyword == "USER"]
    if not users or users[-1].split(":")[0] in {"root", "0"}:
        yield "the final stage must switch to a non-root USER"
    if not any(k == "EXPOSE" and str(svc.port) in rest.split() for k, rest in final):
        yield f"the final stage must EXPOSE {svc.port}"
    entry = " ".join(rest for k, rest in final if k in {"ENTRYPOINT", "CMD", "ENV"})
    if svc.module not in entry:
        yield f"the final stage must run python -m {svc.module}"
    if svc.spark:
        for needed in ("JAVA_HOME=", f"{svc.env_prefix}SPARK__JARS"):
            if needed not in entry:
                yield f"the Spark image must set {needed.rstrip('=')}"


def _ignored(relative: str, patterns: list[str]) -> bool:
    """Whether .dockerignore's patterns (last match wins, ``!`` re-includes) drop a path."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").strip("/")
        if fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(relative, f"{pattern}/*"):
            ignored = not negate
    return ignored


def copy_sources(text: str) -> list[str]:
    """Build-context paths the Dockerfile COPYs (``COPY --from=...`` excluded)."""
    sources = []
    for keyword, rest in _instructions(text):
        words = rest.split()
        if keyword != "COPY" or any(w.startswith("--from=") for w in words):
            continue
        sources += [w for w in words[:-1] if not w.startswith("--")]
    return sources


def _context_problems(ctx: Context, dockerfile: Path) -> list[Problem]:
    """Every COPY source exists in the repository and is not left out by .dockerignore."""
    ignore = ctx.path(".dockerignore")
    patterns = [
        line.strip()
        for line in (ignore.read_text().splitlines() if ignore.is_file() else [])
        if line.strip() and not line.startswith("#")
    ]
    problems = []
    for source in copy_sources(dockerfile.read_text()):
        relative = source.strip("/")
        if not ctx.path(relative).exists():
            problems.append(Problem(ctx.rel(dockerfile), f"COPY {source}: no such path"))
        elif _ignored(relative, patterns):
            problems.append(Problem(ctx.rel(dockerfile), f"COPY {source}: .dockerignore drops it"))
    return problems


def _lock_problems(ctx: Context, contract: Contract) -> list[Problem]:
    """Each image has a lock, and a pin it shares with pyproject.toml's runtime dependencies
    is the same version."""
    project = tomllib.loads(ctx.path("pyproject.toml").read_text())["project"]
    pinned: dict[str, str] = {}
    problems = []
    for requirement in project["dependencies"]:
        match = _PIN.match(requirement)
        if match is None:
            problems.append(Problem("pyproject.toml", f"{requirement!r} is not pinned with =="))
            continue
        pinned[match.group(1).lower().replace("_", "-")] = match.group(2)
    for svc in contract.services.values():
        path = f"{LOCKS}/{svc.name}.txt"
        if not ctx.path(path).is_file():
            problems.append(Problem(path, "missing: run .venv/bin/python deploy/docker/lock.py"))
            continue
        for line in ctx.path(path).read_text().splitlines():
            match = _PIN.match(line)
            if match is None:
                continue
            name, version = match.group(1).lower().replace("_", "-"), match.group(2)
            if name in pinned and pinned[name] != version:
                problems.append(
                    Problem(
                        path,
                        f"{name} is {version}, pyproject.toml pins {pinned[name]}: "
                        "run .venv/bin/python deploy/docker/lock.py",
                    )
                )
    return problems


def _pom_properties(path: Path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    properties = root.find("m:properties", _POM_NS)
    if properties is None:
        return {}
    return {child.tag.split("}", 1)[1]: (child.text or "").strip() for child in properties}


def _jar_pins(ctx: Context) -> list[Problem]:
    image, local = _pom_properties(ctx.path(IMAGE_POM)), _pom_properties(ctx.path(LOCAL_POM))
    return [
        Problem(IMAGE_POM, f"{key} is {image.get(key)}, {LOCAL_POM} has {local.get(key)}")
        for key in SHARED_JAR_PROPERTIES
        if key in local and image.get(key) != local[key]
    ]


def _shellcheck(ctx: Context) -> list[Problem]:
    scripts = sorted(p for pattern in SHELL_SCRIPTS for p in ctx.root.glob(pattern))
    try:
        shellcheck = ctx.tool("shellcheck", "SHELLCHECK", SHELLCHECK_HINT)
    except ToolMissing as exc:
        return ctx.missing("shellcheck", exc, DOCKER_DIR)
    problems = []
    for script in scripts:
        result = subprocess.run(
            [shellcheck, "--format=gcc", str(script)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            problems.append(Problem(ctx.rel(script), f"shellcheck:\n{result.stdout.strip()}"))
    return problems


def check(ctx: Context, contract: Contract) -> list[Problem]:
    """Dockerfiles, the lock, the jar pins, the shell scripts."""
    problems: list[Problem] = []
    for svc in contract.services.values():
        path = ctx.path(f"{DOCKER_DIR}/{svc.name}.Dockerfile")
        if not path.is_file():
            problems.append(Problem(ctx.rel(path), "missing"))
            continue
        problems += [Problem(ctx.rel(path), m) for m in dockerfile_messages(path.read_text(), svc)]
        problems += _context_problems(ctx, path)
    if not ctx.path(".dockerignore").is_file():
        problems.append(Problem(".dockerignore", "missing (the build context would hold .venv)"))
    return problems + _lock_problems(ctx, contract) + _jar_pins(ctx) + _shellcheck(ctx)
