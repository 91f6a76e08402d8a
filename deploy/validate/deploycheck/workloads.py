"""Icefjord's rules for the rendered Kubernetes objects of one overlay (pure: objects in,
messages out). Each message starts with the object it is about."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from deploycheck.contract import Contract, ServiceContract

Obj = dict[str, Any]

_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|USER_INFO|ACCESS_KEY|CATALOG__ICEFJORD__URI")
_CREDENTIALS_IN_URL = re.compile(r"://[^/\s:@]+:[^/\s@]+@")
_ALLOWED_ENV_PREFIXES = ("PYICEBERG_CATALOG__", "SPARK_", "POD_")
SPARK_IMAGE_KEY = "spark.kubernetes.container.image"


def _named(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o.get("kind") == kind}


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector matches ``labels`` (an empty selector matches nothing here)."""
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expr in expressions:
        value, values = labels.get(expr["key"]), expr.get("values") or []
        ok = {
            "In": value in values,
            "NotIn": value not in values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }[expr["operator"]]
        if not ok:
            return False
    return True


def _probe_ok(probe: Obj | None, path: str, port_names: set[str], port: int) -> bool:
    get = (probe or {}).get("httpGet") or {}
    return get.get("path") == path and (get.get("port") in port_names | {port})


def _container_problems(
    where: str, container: Obj, pod: Obj, svc: ServiceContract, config_maps: dict[str, Obj]
) -> Iterator[str]:
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
    if svc.port not in ports.values():
        yield f"{where}: no container port {svc.port}"
    metrics_names = {name for name, number in ports.items() if number == svc.port and name}
    if not _probe_ok(container.get("livenessProbe"), "/healthz", metrics_names, svc.port):
        yield f"{where}: livenessProbe must GET /healthz on port {svc.port}"
    if not _probe_ok(container.get("readinessProbe"), "/readyz", metrics_names, svc.port):
        yield f"{where}: readinessProbe must GET /readyz on port {svc.port}"
    resources = container.get("resources") or {}
    for kind in ("requests", "limits"):
        missing = {"cpu", "memory"} - set(resources.get(kind) or {})
        if missing:
            yield f"{where}: resources.{kind} lacks {', '.join(sorted(missing))}"
    security = container.get("securityContext") or {}
    if security.get("allowPrivilegeEscalation") is not False:
        yield f"{where}: allowPrivilegeEscalation must be false"
    if "ALL" not in ((security.get("capabilities") or {}).get("drop") or []):
        yield f"{where}: capabilities must drop ALL"
    if security.get("readOnlyRootFilesystem") is not True:
        yield f"{where}: readOnlyRootFilesystem must be true"
    empty_dirs = {v["name"] for v in pod.get("volumes") or [] if "emptyDir" in v}
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}
    if mounts.get("/tmp") not in empty_dirs:
        yield f"{where}: /tmp must be an emptyDir (the root filesystem is read-only)"
    yield from _env_problems(where, container, svc, config_maps, mounts, empty_dirs)


def _env_problems(
    where: str,
    container: Obj,
    svc: ServiceContract,
    config_maps: dict[str, Obj],
    mounts: dict[str, str],
    empty_dirs: set[str],
) -> Iterator[str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = (source.get("configMapRef") or {}).get("name")
        if ref is not None and ref not in config_maps:
            yield f"{where}: envFrom ConfigMap {ref} does not exist"
        env.update((config_maps.get(ref or "") or {}).get("data") or {})
    for item in container.get("env") or []:
        name, value_from = item["name"], item.get("valueFrom") or {}
        if "value" in item:
            env[name] = str(item["value"])
            if _SECRET_NAME.search(name) or _CREDENTIALS_IN_URL.search(str(item["value"])):
                yield f"{where}: {name} holds a literal secret; use secretKeyRef"
        ref = value_from.get("configMapKeyRef")
        if ref:
            data = (config_maps.get(ref["name"]) or {}).get("data") or {}
            if ref["key"] in data:
                env[name] = data[ref["key"]]
            elif not ref.get("optional"):
                yield f"{where}: {name} refers to missing ConfigMap key {ref['name']}/{ref['key']}"
        if _SECRET_NAME.search(name) and "value" not in item and "secretKeyRef" not in value_from:
            yield f"{where}: {name} must come from a secretKeyRef"
    for name, value in env.items():
        if name.startswith("ICEFJORD_") and not name.startswith(svc.env_prefix):
            yield f"{where}: {name} does not carry {svc.name}'s prefix {svc.env_prefix}"
        elif not name.startswith(("ICEFJORD_", *_ALLOWED_ENV_PREFIXES)):
            yield f"{where}: {name} is not an Icefjord, pyiceberg or Spark setting"
        if _CREDENTIALS_IN_URL.search(value):
            yield f"{where}: {name} has credentials in a ConfigMap value"
    if svc.spark:
        scratch = env.get("SPARK_LOCAL_DIRS", "")
        if mounts.get(scratch) not in empty_dirs:
            yield f"{where}: SPARK_LOCAL_DIRS ({scratch or 'unset'}) must be an emptyDir mount"


def _deployment_problems(
    deployment: Obj, svc: ServiceContract, objects: list[Obj], config_maps: dict[str, Obj]
) -> Iterator[str]:
    where = f"{deployment['kind']}/{svc.name}"
    if deployment["kind"] == "StatefulSet":
        governing = deployment["spec"].get("serviceName")
        headless = _named(objects, "Service").get(governing or "")
        if headless is None or headless["spec"].get("clusterIP") != "None":
            yield f"{where}: its serviceName {governing!r} must be a headless Service"
    pod_template = deployment["spec"]["template"]
    pod, labels = pod_template["spec"], pod_template["metadata"].get("labels") or {}
    grace = int(pod.get("terminationGracePeriodSeconds", 30))
    if grace <= svc.longest_flush_s:
        yield (
            f"{where}: terminationGracePeriodSeconds {grace} is not longer than its longest "
            f"flush ({svc.longest_flush_s} s)"
        )
    pod_security = pod.get("securityContext") or {}
    if pod_security.get("runAsNonRoot") is not True:
        yield f"{where}: pod securityContext.runAsNonRoot must be true"
    if (pod_security.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        yield f"{where}: seccompProfile must be RuntimeDefault"
    containers = pod.get("containers") or []
    for container in containers:
        yield from _container_problems(
            f"{where} container {container['name']}", container, pod, svc, config_maps
        )
    account = pod.get("serviceAccountName")
    if account not in _named(objects, "ServiceAccount"):
        yield f"{where}: ServiceAccount {account} does not exist"
    port_names = {p.get("name") for c in containers for p in c.get("ports") or []}
    for kind in ("PodDisruptionBudget", "Service", "PodMonitor"):
        if not any(_covers(o, labels, port_names) for o in objects if o.get("kind") == kind):
            yield f"{where}: no {kind} selects its pods (on a declared port)"


def _covers(obj: Obj, labels: dict[str, str], port_names: set[str]) -> bool:
    """Whether a budget, Service or PodMonitor applies to pods with ``labels`` and ports."""
    spec = obj["spec"]
    if obj["kind"] == "Service":
        return _selects({"matchLabels": spec.get("selector")}, labels)
    if not _selects(spec.get("selector") or {}, labels):
        return False
    if obj["kind"] == "PodMonitor":
        return any(e.get("port") in port_names for e in spec.get("podMetricsEndpoints") or [])
    return True


def _spark_problems(objects: list[Obj], deployments: dict[str, Obj]) -> Iterator[str]:
    """A Spark conf naming an executor image must name the image of the writer it serves."""
    images = {
        c["image"]
        for d in deployments.values()
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    for obj in objects:
        if obj.get("kind") != "ConfigMap":
            continue
        for key, text in (obj.get("data") or {}).items():
            if not key.endswith(".conf"):
                continue
            for line in str(text).splitlines():
                parts = line.split(None, 1)
                if len(parts) == 2 and parts[0] == SPARK_IMAGE_KEY and parts[1] not in images:
                    yield (
                        f"ConfigMap/{obj['metadata']['name']} {key}: {SPARK_IMAGE_KEY} "
                        f"{parts[1]} is not the image of any Deployment ({sorted(images)})"
                    )


def _resolved_env(container: Obj, config_maps: dict[str, Obj]) -> dict[str, str]:
    """A container's environment as far as literals and ConfigMaps give it (not Secrets)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = (source.get("configMapRef") or {}).get("name") or ""
        env.update((config_maps.get(ref) or {}).get("data") or {})
    for item in container.get("env") or []:
        ref = (item.get("valueFrom") or {}).get("configMapKeyRef")
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif ref:
            data = (config_maps.get(ref["name"]) or {}).get("data") or {}
            if ref["key"] in data:
                env[item["name"]] = data[ref["key"]]
    return env


# KEDA's Kafka scaler names librdkafka's SASL mechanisms its own way.
_KEDA_SASL = {
    "PLAIN": "plaintext",
    "SCRAM-SHA-256": "scram_sha256",
    "SCRAM-SHA-512": "scram_sha512",
}


def _scaler_problems(
    objects: list[Obj], contract: Contract, config_maps: dict[str, Obj]
) -> Iterator[str]:
    """A ScaledObject must scale an existing workload, and a kafka trigger must watch that
    service's own consumer group on its brokers, with its SASL mechanism and TLS."""
    authentications = _named(objects, "TriggerAuthentication")
    for scaled in _named(objects, "ScaledObject").values():
        where = f"ScaledObject/{scaled['metadata']['name']}"
        spec = scaled["spec"]
        ref = spec["scaleTargetRef"]
        kind = ref.get("kind", "Deployment")
        target = _named(objects, kind).get(ref["name"])
        if target is None:
            yield f"{where}: scales {kind}/{ref['name']}, which does not exist"
            continue
        if spec.get("minReplicaCount", 0) > spec.get("maxReplicaCount", 100):
            yield f"{where}: minReplicaCount is above maxReplicaCount"
        svc = contract.services.get(ref["name"])
        container = target["spec"]["template"]["spec"]["containers"][0]
        env = _resolved_env(container, config_maps)
        for trigger in spec["triggers"]:
            if trigger["type"] != "kafka" or svc is None:
                continue
            meta = trigger["metadata"]
            prefix = svc.env_prefix
            group = env.get(f"{prefix}GROUP_ID", svc.group_id)
            protocol = env.get(f"{prefix}KAFKA__SECURITY_PROTOCOL", "PLAINTEXT").upper()
            mechanism = env.get(f"{prefix}KAFKA__SASL_MECHANISM", "")
            expected = {
                "bootstrapServers": env.get(f"{prefix}KAFKA__BOOTSTRAP_SERVERS"),
                "consumerGroup": group,
                "sasl": _KEDA_SASL.get(mechanism.upper(), "none")
                if protocol.startswith("SASL")
                else "none",
                "tls": "enable" if protocol in ("SSL", "SASL_SSL") else "disable",
            }
            defaults = {"sasl": "none", "tls": "disable"}
            for key, value in expected.items():
                found = meta.get(key, defaults.get(key))
                if found != value:
                    yield f"{where}: kafka trigger {key} is {found!r}, the service's is {value!r}"
            auth = (trigger.get("authenticationRef") or {}).get("name")
            if expected["sasl"] != "none" and auth not in authentications:
                yield f"{where}: SASL needs a TriggerAuthentication; {auth!r} does not exist"


def workload_problems(objects: list[Obj], contract: Contract) -> list[str]:
    """Every rule above over one overlay's rendered objects."""
    deployments = {**_named(objects, "Deployment"), **_named(objects, "StatefulSet")}
    config_maps = _named(objects, "ConfigMap")
    messages: list[str] = []
    for svc in contract.services.values():
        deployment = deployments.get(svc.name)
        if deployment is None or deployment["kind"] != svc.workload:
            found = f" (a {deployment['kind']})" if deployment is not None else ""
            messages.append(f"{svc.workload}/{svc.name}: missing{found}")
            continue
        messages += _deployment_problems(deployment, svc, objects, config_maps)
    messages += [
        f"Secret/{o['metadata']['name']}: Secrets must not be committed; reference them"
        for o in objects
        if o.get("kind") == "Secret"
    ]
    messages += _spark_problems(objects, deployments)
    messages += _scaler_problems(objects, contract, config_maps)
    return messages
