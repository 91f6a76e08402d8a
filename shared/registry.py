"""The Schema Registry, reached only through the Confluent-compatible REST API."""

from __future__ import annotations

from confluent_kafka.schema_registry import SchemaRegistryClient

from shared.settings import RegistrySettings


def make_registry_client(settings: RegistrySettings) -> SchemaRegistryClient:
    """A registry client for Apicurio's ``/apis/ccompat/v7`` or a Confluent Schema Registry."""
    return SchemaRegistryClient(settings.client_config())
