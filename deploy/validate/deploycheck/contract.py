"""The deployment contract (deploy/validate/contract.toml): services, ports and metrics."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

CONTRACT_FILE = "deploy/validate/contract.toml"

MetricType = Literal["counter", "gauge", "histogram"]
# Series a histogram family exposes besides its name; `le` is the bucket label.
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count", "_created")
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = frozenset({"job", "instance"})


@dataclass(frozen=True)
class ServiceContract:
    """One service: how it runs and where it serves /metrics, /healthz and /readyz."""

    name: str
    module: str
    metrics_module: str
    port: int
    env_prefix: str
    longest_flush_s: int
    spark: bool
    # The workload kind: a StatefulSet where a pod's identity must outlive its replacement.
    workload: Literal["Deployment", "StatefulSet"] = "Deployment"
    # The Kafka consumer group its settings default to (None: it has none of its own).
    group_id: str | None = None


@dataclass(frozen=True)
class MetricContract:
    """One metric family as the service exposes it."""

    name: str
    service: str
    type: MetricType
    labels: frozenset[str]

    def series_labels(self, series: str) -> frozenset[str]:
        """Labels a selector on ``series`` (this family's name or a histogram series) may use."""
        extra = {"le"} if series == f"{self.name}_bucket" else set()
        return self.labels | TARGET_LABELS | extra


@dataclass(frozen=True)
class Contract:
    services: dict[str, ServiceContract]
    metrics: dict[str, MetricContract]
    label_values: dict[str, frozenset[str]] = field(default_factory=dict)

    def family(self, series: str) -> MetricContract | None:
        """The metric family a series name belongs to, or None if the contract has none."""
        if series in self.metrics:
            return self.metrics[series]
        for suffix in HISTOGRAM_SUFFIXES:
            base = series.removesuffix(suffix)
            if base != series and base in self.metrics:
                metric = self.metrics[base]
                if metric.type == "histogram":
                    return metric
        return None

    def service_for_prefix(self, env_name: str) -> ServiceContract | None:
        """The service whose env prefix ``env_name`` starts with, if any."""
        for service in self.services.values():
            if env_name.startswith(service.env_prefix):
                return service
        return None


def load_contract(root: Path) -> Contract:
    """Parse the contract file under ``root``. Raises OSError, tomllib.TOMLDecodeError, KeyError."""
    data = tomllib.loads((root / CONTRACT_FILE).read_text())
    services = {
        name: ServiceContract(
            name=name,
            module=str(raw["module"]),
            metrics_module=str(raw["metrics_module"]),
            port=int(raw["port"]),
            env_prefix=str(raw["env_prefix"]),
            longest_flush_s=int(raw["longest_flush_s"]),
            spark=bool(raw["spark"]),
            workload="StatefulSet" if raw.get("workload") == "StatefulSet" else "Deployment",
            group_id=str(raw["group_id"]) if "group_id" in raw else None,
        )
        for name, raw in data["services"].items()
    }
    metrics = {
        name: MetricContract(
            name=name,
            service=str(raw["service"]),
            type=raw["type"],
            labels=frozenset(str(label) for label in raw["labels"]),
        )
        for name, raw in data["metrics"].items()
    }
    label_values = {
        str(label): frozenset(str(v) for v in values)
        for label, values in data.get("label_values", {}).items()
    }
    return Contract(services=services, metrics=metrics, label_values=label_values)
