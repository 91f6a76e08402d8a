"""Kubernetes: render each overlay with `kubectl kustomize`, validate every object against the
Kubernetes JSON schemas in strict mode (kubernetes-validate, offline), then Icefjord's rules:
probes, resources, non-root, read-only root filesystem, grace periods, Secret references only,
budgets and monitors for every Deployment or StatefulSet, and the Spark-on-Kubernetes wiring."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import yaml

from deploycheck.contract import Contract
from deploycheck.findings import Context, Problem, ToolMissing
from deploycheck.workloads import workload_problems

OVERLAYS = "deploy/k8s/overlays"
SCHEMAS = "deploy/validate/schemas"
# The oldest Kubernetes release the manifests must fit (kubernetes-validate ships 1.25-1.37).
KUBERNETES_VERSION = "1.30"
KUBECTL_HINT = (
    "kubectl >= 1.27 (the machine image's apt package `kubectl`), or kustomize v5: "
    "go install sigs.k8s.io/kustomize/kustomize/v5@v5.5.0"
)


def overlays(ctx: Context) -> list[Path]:
    return sorted(p for p in ctx.path(OVERLAYS).iterdir() if (p / "kustomization.yaml").is_file())


def renderer(ctx: Context) -> list[str]:
    """The command that renders an overlay: `kubectl kustomize`, else `kustomize build`.

    Raises ToolMissing when neither is installed.
    """
    try:
        return [ctx.tool("kubectl", "KUBECTL", KUBECTL_HINT), "kustomize"]
    except ToolMissing:
        try:
            return [ctx.tool("kustomize", "KUSTOMIZE", KUBECTL_HINT), "build"]
        except ToolMissing:
            raise ToolMissing(f"neither kubectl nor kustomize found: {KUBECTL_HINT}") from None


def render(
    ctx: Context, overlay: Path, command: str | list[str]
) -> tuple[list[dict[str, Any]], str]:
    """The objects the overlay renders to, or ([], error text) on failure. ``command`` is a
    kubectl path or a :func:`renderer` command."""
    prefix = [command, "kustomize"] if isinstance(command, str) else command
    result = subprocess.run(
        [*prefix, str(overlay)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        return [], (result.stderr or result.stdout).strip()
    return [doc for doc in yaml.safe_load_all(result.stdout) if isinstance(doc, dict)], ""


def _crd_schema(ctx: Context, api_version: str, kind: str) -> dict[str, Any] | None:
    group, _, version = api_version.rpartition("/")
    path = ctx.path(SCHEMAS) / f"{kind.lower()}.{group}-{version}.json"
    return dict(json.loads(path.read_text())) if path.is_file() else None


def schema_messages(ctx: Context, obj: dict[str, Any]) -> list[str]:
    """Strict schema violations of one object (Kubernetes kinds, or a vendored CRD schema)."""
    kind, api_version = str(obj.get("kind")), str(obj.get("apiVersion"))
    name = f"{kind}/{obj.get('metadata', {}).get('name')}"
    crd = _crd_schema(ctx, api_version, kind)
    if crd is not None:
        validator = jsonschema.Draft202012Validator(crd)
        return [
            f"{name}: at {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in validator.iter_errors(obj)
        ]
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return [f"{name}: no schema for {api_version} {kind} (add one under {SCHEMAS})"]
    except kubernetes_validate.ValidationError as exc:
        where = "/".join(map(str, exc.path)) or "(top)"
        return [f"{name}: at {where}: {exc.message}"]
    return []


def _embedded_pod_templates(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Pod manifests carried as files in a ConfigMap (Spark executor pod templates)."""
    if obj.get("kind") != "ConfigMap":
        return []
    found = []
    for key, text in (obj.get("data") or {}).items():
        if key.endswith((".yaml", ".yml")):
            doc = yaml.safe_load(text)
            if isinstance(doc, dict) and doc.get("kind") == "Pod":
                found.append((key, doc))
    return found


def check_overlay(
    ctx: Context, contract: Contract, overlay: Path, command: list[str]
) -> list[Problem]:
    """Render one overlay and check everything in it."""
    label = ctx.rel(overlay)
    objects, error = render(ctx, overlay, command)
    if error:
        return [Problem(label, f"{Path(command[0]).name} {command[1]} failed: {error}")]
    problems: list[Problem] = []
    for obj in objects:
        problems += [Problem(label, message) for message in schema_messages(ctx, obj)]
        for key, pod in _embedded_pod_templates(obj):
            owner = f"ConfigMap/{obj['metadata']['name']} {key}"
            problems += [
                Problem(label, f"{owner}: {message}") for message in schema_messages(ctx, pod)
            ]
        namespaced = obj.get("kind") != "Namespace"
        if namespaced and not obj.get("metadata", {}).get("namespace"):
            problems.append(
                Problem(label, f"{obj.get('kind')}/{obj['metadata']['name']}: no namespace")
            )
    problems += [Problem(label, message) for message in workload_problems(objects, contract)]
    return problems


def check(ctx: Context, contract: Contract) -> list[Problem]:
    """Every overlay under deploy/k8s/overlays (there must be dev and prod)."""
    try:
        command = renderer(ctx)
    except ToolMissing as exc:
        return ctx.missing("kustomize", exc, OVERLAYS)
    found = overlays(ctx)
    problems = [
        Problem(OVERLAYS, f"overlay {name} is missing")
        for name in ("dev", "prod")
        if name not in {p.name for p in found}
    ]
    for overlay in found:
        problems += check_overlay(ctx, contract, overlay, command)
    return problems
