"""The Kubernetes overlays render, fit the strict Kubernetes schemas, and keep Icefjord's rules;
each rule is shown to catch the fault it is for."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploycheck import kubernetes
from deploycheck.contract import Contract
from deploycheck.findings import Context, ToolMissing
from deploycheck.workloads import workload_problems

pytestmark = pytest.mark.unit

Edit = Callable[[str, str, str], None]
Objects = list[dict[str, Any]]


@pytest.fixture(scope="module")
def prod_objects(root: Path, kubectl: list[str]) -> Objects:
    objects, error = kubernetes.render(Context(root), root / kubernetes.OVERLAYS / "prod", kubectl)
    assert error == ""
    return objects


def find(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def workload(objects: Objects, name: str) -> dict[str, Any]:
    """The Deployment or StatefulSet ``name``."""
    return next(
        o
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet") and o["metadata"]["name"] == name
    )


def container(objects: Objects, name: str) -> dict[str, Any]:
    deployment = workload(objects, name)
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def test_every_overlay_renders_and_passes(
    ctx: Context, contract: Contract, kubectl: list[str]
) -> None:
    assert kubernetes.check(ctx, contract) == []


def test_overlays_differ_where_they_should(
    prod_objects: Objects, root: Path, kubectl: list[str]
) -> None:
    dev, error = kubernetes.render(Context(root), root / kubernetes.OVERLAYS / "dev", kubectl)
    assert error == ""
    assert {o["metadata"].get("namespace") for o in dev if o["kind"] != "Namespace"} == {
        "icefjord-dev"
    }
    # prod: KEDA sets the normalizer's and the writer's replicas from their lag; dev: one
    # normalizer, no autoscaler.
    assert find(prod_objects, "ScaledObject", "cdc-normalizer")["spec"]["maxReplicaCount"] == 6
    assert "replicas" not in find(prod_objects, "StatefulSet", "cdc-normalizer")["spec"]
    writer = find(prod_objects, "ScaledObject", "iceberg-writer")
    assert writer["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "iceberg-writer",
    }
    assert "replicas" not in find(prod_objects, "Deployment", "iceberg-writer")["spec"]
    assert not any(o["kind"] == "ScaledObject" for o in dev)
    assert find(dev, "StatefulSet", "cdc-normalizer")["spec"]["replicas"] == 1
    # Only prod runs the writer's Spark on Kubernetes, with RBAC for its executors.
    assert any(o["kind"] == "Role" for o in prod_objects)
    assert not any(o["kind"] == "Role" for o in dev)


def test_prod_writer_is_a_spark_driver_on_kubernetes(prod_objects: Objects) -> None:
    writer = container(prod_objects, "iceberg-writer")
    config = next(
        o
        for o in prod_objects
        if o["kind"] == "ConfigMap"
        and o["metadata"]["name"].startswith("icefjord-iceberg-writer-")
        and "ICEFJORD_WRITER_SPARK__MASTER" in o.get("data", {})
    )
    assert config["data"]["ICEFJORD_WRITER_SPARK__MASTER"].startswith("k8s://")
    conf = next(e["value"] for e in writer["env"] if e["name"] == "ICEFJORD_WRITER_SPARK__CONF")
    assert '"spark.driver.host": "$(POD_IP)"' in conf
    binding = find(prod_objects, "RoleBinding", "icefjord-spark-driver")
    assert binding["subjects"][0]["name"] == "icefjord-iceberg-writer"
    account = find(prod_objects, "ServiceAccount", "icefjord-iceberg-writer")
    assert account["automountServiceAccountToken"] is True


def test_strict_schema_rejects_an_unknown_field(root: Path, prod_objects: Objects) -> None:
    deployment = copy.deepcopy(find(prod_objects, "Deployment", "schema-watcher"))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    messages = kubernetes.schema_messages(Context(root), deployment)
    assert len(messages) == 1 and messages[0].startswith("Deployment/schema-watcher: at ")
    assert "livenesProbe" in messages[0]


def test_the_podmonitor_schema_is_strict(root: Path, prod_objects: Objects) -> None:
    monitor = copy.deepcopy(find(prod_objects, "PodMonitor", "icefjord"))
    assert kubernetes.schema_messages(Context(root), monitor) == []
    monitor["spec"]["podMetricsEndpoints"][0]["intervall"] = "15s"
    assert "intervall" in " ".join(kubernetes.schema_messages(Context(root), monitor))


def test_the_executor_pod_template_is_validated_as_a_pod(
    ctx: Context, contract: Contract, edit: Edit, kubectl: list[str]
) -> None:
    edit(
        "deploy/k8s/components/spark-on-kubernetes/executor-pod-template.yaml",
        "  automountServiceAccountToken: false\n",
        "  automountServiceAccountToken: false\n  restartPolicyy: Never\n",
    )
    found = [str(p) for p in kubernetes.check(ctx, contract)]
    assert len(found) == 1, found
    assert found[0].startswith("deploy/k8s/overlays/prod: ConfigMap/icefjord-iceberg-writer-spark-")
    assert "executor-pod-template.yaml" in found[0] and "restartPolicyy" in found[0]


def test_a_kustomize_error_names_the_overlay(
    ctx: Context, contract: Contract, edit: Edit, kubectl: list[str]
) -> None:
    edit(
        "deploy/k8s/overlays/dev/kustomization.yaml",
        "  - path: small-resources.yaml\n",
        "  - path: missing.yaml\n",
    )
    found = [str(p) for p in kubernetes.check(ctx, contract)]
    assert len(found) == 1 and found[0].startswith(
        "deploy/k8s/overlays/dev: kubectl kustomize failed"
    )


@pytest.mark.parametrize(
    ("service", "mutate", "expected"),
    [
        (
            "cdc-normalizer",
            lambda c, pod: c.pop("readinessProbe"),
            "readinessProbe must GET /readyz on port 9401",
        ),
        (
            "schema-watcher",
            lambda c, pod: c["securityContext"].update(readOnlyRootFilesystem=False),
            "readOnlyRootFilesystem must be true",
        ),
        (
            "maintainer",
            lambda c, pod: c["resources"].pop("limits"),
            "resources.limits lacks cpu, memory",
        ),
        (
            "iceberg-writer",
            lambda c, pod: c["env"].append(
                {"name": "ICEFJORD_WRITER_REGISTRY__BASIC_AUTH_USER_INFO", "value": "u:p"}
            ),
            "ICEFJORD_WRITER_REGISTRY__BASIC_AUTH_USER_INFO holds a literal secret",
        ),
        (
            "iceberg-writer",
            lambda c, pod: c["volumeMounts"].pop(),
            "SPARK_LOCAL_DIRS (/spark-scratch) must be an emptyDir mount",
        ),
        (
            "cdc-normalizer",
            lambda c, pod: c["env"].append(
                {"name": "ICEFJORD_WATCHER_LOG_LEVEL", "value": "DEBUG"}
            ),
            "ICEFJORD_WATCHER_LOG_LEVEL does not carry cdc-normalizer's prefix "
            "ICEFJORD_NORMALIZER_",
        ),
        (
            "maintainer",
            lambda c, pod: pod.update(terminationGracePeriodSeconds=30),
            "terminationGracePeriodSeconds 30 is not longer than its longest flush",
        ),
        (
            "schema-watcher",
            lambda c, pod: pod["securityContext"].pop("runAsNonRoot"),
            "pod securityContext.runAsNonRoot must be true",
        ),
    ],
)
def test_each_workload_rule_catches_its_fault(
    prod_objects: Objects,
    contract: Contract,
    service: str,
    mutate: Callable[[dict[str, Any], dict[str, Any]], object],
    expected: str,
) -> None:
    objects = copy.deepcopy(prod_objects)
    target = workload(objects, service)
    pod = target["spec"]["template"]["spec"]
    mutate(pod["containers"][0], pod)
    found = workload_problems(objects, contract)
    assert len(found) == 1, found
    assert found[0].startswith(f"{target['kind']}/{service}") and expected in found[0]


def test_the_normalizer_must_be_a_stateful_set_with_a_headless_service(
    prod_objects: Objects, contract: Contract
) -> None:
    """Its transactional.id comes from its hostname, which only a StatefulSet keeps."""
    objects = copy.deepcopy(prod_objects)
    find(objects, "StatefulSet", "cdc-normalizer")["kind"] = "Deployment"
    assert workload_problems(objects, contract) == [
        "StatefulSet/cdc-normalizer: missing (a Deployment)",
        "ScaledObject/cdc-normalizer: scales StatefulSet/cdc-normalizer, which does not exist",
    ]
    objects = copy.deepcopy(prod_objects)
    find(objects, "Service", "cdc-normalizer")["spec"].pop("clusterIP")
    assert workload_problems(objects, contract) == [
        "StatefulSet/cdc-normalizer: its serviceName 'cdc-normalizer' must be a headless Service"
    ]


def test_a_deployment_without_budget_or_monitor_is_reported(
    prod_objects: Objects, contract: Contract
) -> None:
    objects = [
        o
        for o in copy.deepcopy(prod_objects)
        if not (o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"] == "maintainer")
    ]
    monitor = find(objects, "PodMonitor", "icefjord")
    monitor["spec"]["selector"]["matchExpressions"][0]["values"].remove("schema-watcher")
    assert workload_problems(objects, contract) == [
        "Deployment/schema-watcher: no PodMonitor selects its pods (on a declared port)",
        "Deployment/maintainer: no PodDisruptionBudget selects its pods (on a declared port)",
    ]


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        (
            "consumerGroup",
            "icefjord-writer",
            "kafka trigger consumerGroup is 'icefjord-writer', the service's is "
            "'icefjord-cdc-normalizer'",
        ),
        (
            "bootstrapServers",
            "kafka:9092",
            "kafka trigger bootstrapServers is 'kafka:9092', the service's is "
            "'kafka-bootstrap.kafka.svc:9093'",
        ),
        ("sasl", "plaintext", "kafka trigger sasl is 'plaintext', the service's is 'scram_sha512'"),
        ("tls", None, "kafka trigger tls is 'disable', the service's is 'enable'"),
    ],
)
def test_the_lag_autoscaler_must_watch_the_normalizers_own_group_and_brokers(
    prod_objects: Objects, contract: Contract, key: str, value: str | None, expected: str
) -> None:
    objects = copy.deepcopy(prod_objects)
    metadata = find(objects, "ScaledObject", "cdc-normalizer")["spec"]["triggers"][0]["metadata"]
    if value is None:
        metadata.pop(key)
    else:
        metadata[key] = value
    assert workload_problems(objects, contract) == [f"ScaledObject/cdc-normalizer: {expected}"]


def test_the_lag_autoscaler_needs_its_target_and_its_credentials(
    prod_objects: Objects, contract: Contract
) -> None:
    objects = [o for o in copy.deepcopy(prod_objects) if o["kind"] != "TriggerAuthentication"]
    scaled = find(objects, "ScaledObject", "cdc-normalizer")
    assert workload_problems(objects, contract) == [
        f"ScaledObject/{name}: SASL needs a TriggerAuthentication; 'icefjord-kafka' does not exist"
        for name in ("cdc-normalizer", "iceberg-writer")
    ]
    objects = copy.deepcopy(prod_objects)
    scaled = find(objects, "ScaledObject", "cdc-normalizer")
    scaled["spec"]["scaleTargetRef"]["kind"] = "Deployment"
    assert workload_problems(objects, contract) == [
        "ScaledObject/cdc-normalizer: scales Deployment/cdc-normalizer, which does not exist"
    ]


def test_the_writers_autoscaler_must_watch_the_writers_own_group(
    prod_objects: Objects, contract: Contract
) -> None:
    objects = copy.deepcopy(prod_objects)
    metadata = find(objects, "ScaledObject", "iceberg-writer")["spec"]["triggers"][0]["metadata"]
    metadata["consumerGroup"] = "icefjord-cdc-normalizer"
    assert workload_problems(objects, contract) == [
        "ScaledObject/iceberg-writer: kafka trigger consumerGroup is 'icefjord-cdc-normalizer', "
        "the service's is 'icefjord-writer'"
    ]


def test_the_keda_schemas_are_strict(root: Path, prod_objects: Objects) -> None:
    scaled = copy.deepcopy(find(prod_objects, "ScaledObject", "cdc-normalizer"))
    scaled["spec"]["triggers"][0]["metadata"]["allowIdleConsumers"] = False  # not a string
    scaled["spec"]["triggers"][0]["metadata"]["lagTreshold"] = "10"  # a misspelt parameter
    found = kubernetes.schema_messages(Context(root), scaled)
    assert any("allowIdleConsumers" in m or "False is not of type" in m for m in found), found
    assert any("lagTreshold" in m for m in found), found
    assert (
        kubernetes.schema_messages(
            Context(root), find(prod_objects, "TriggerAuthentication", "icefjord-kafka")
        )
        == []
    )


def test_committed_secrets_and_a_stale_executor_image_are_reported(
    prod_objects: Objects, contract: Contract
) -> None:
    objects = copy.deepcopy(prod_objects)
    objects.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "oops"}})
    spark = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap" and "spark-defaults.conf" in o.get("data", {})
    )
    spark["data"]["spark-defaults.conf"] = spark["data"]["spark-defaults.conf"].replace(
        "icefjord/iceberg-writer:0.1.0", "icefjord/iceberg-writer:0.0.9"
    )
    found = workload_problems(objects, contract)
    assert found[0] == "Secret/oops: Secrets must not be committed; reference them"
    assert (
        "spark.kubernetes.container.image icefjord/iceberg-writer:0.0.9 is not the image"
        in found[1]
    )
    assert len(found) == 2


def test_base_manifests_reference_only_secrets(root: Path) -> None:
    for path in (root / "deploy" / "k8s").rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            assert not (isinstance(doc, dict) and doc.get("kind") == "Secret"), path


def test_kustomize_is_the_fallback_renderer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "kustomize"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("KUBECTL", raising=False)
    monkeypatch.delenv("KUSTOMIZE", raising=False)
    assert kubernetes.renderer(Context(tmp_path)) == [str(fake), "build"]
    fake.unlink()
    with pytest.raises(ToolMissing, match="neither kubectl nor kustomize"):
        kubernetes.renderer(Context(tmp_path))
