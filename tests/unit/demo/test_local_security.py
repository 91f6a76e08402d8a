"""The local stack's security settings as rendered for each process (``security=sasl_ssl``);
tests/integration/test_security.py runs them against the real broker and registry."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import pytest

from icefjord.local.artifacts import connect_dist_for
from icefjord.local.components import broker_properties, registry_properties
from icefjord.local.connect import KafkaConnect
from icefjord.local.security import (
    SecurityError,
    SecurityFiles,
    keytool_steps,
    subject_alternative_names,
)
from icefjord.local.services import SERVICES, service_env
from icefjord.local.settings import LocalSettings
from services.cdc_normalizer.config import NormalizerSettings
from services.schema_watcher.config import WatcherSettings
from shared.settings import RegistrySettings

pytestmark = pytest.mark.unit

SECRETS = {"store_password": "st0re", "kafka_password": "k4fka", "registry_password": "r3g"}


def secured(tmp_path: Path, write_secrets: bool = True) -> LocalSettings:
    settings = LocalSettings(
        state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", security="sasl_ssl"
    )
    if write_secrets:
        home = settings.security_files.home
        home.mkdir(parents=True)
        (home / "secrets.json").write_text(json.dumps(SECRETS))
    return settings


def test_keytool_is_never_given_a_password_as_an_argument(tmp_path: Path) -> None:
    steps = keytool_steps(SecurityFiles(tmp_path), "127.0.0.1")
    assert [step[0] for step in steps][:2] == ["-genkeypair", "-exportcert"]
    for step in steps:
        assert "-storepass" not in step and "-keypass" not in step
        name = step[step.index("-storepass:env") + 1]
        assert name.isupper() and name.startswith("ICEFJORD_")


def test_the_certificate_names_the_stack_host() -> None:
    assert subject_alternative_names("127.0.0.1") == "IP:127.0.0.1,DNS:localhost"
    assert subject_alternative_names("10.1.2.3").startswith("IP:10.1.2.3,")
    assert subject_alternative_names("kafka.internal").startswith("DNS:kafka.internal,")


def test_the_broker_serves_clients_sasl_ssl_and_keeps_its_controller_internal(
    tmp_path: Path,
) -> None:
    s = secured(tmp_path)
    broker = broker_properties(s)
    assert broker["listeners"] == (
        f"SASL_SSL://127.0.0.1:{s.kafka_port},CONTROLLER://127.0.0.1:{s.kafka_controller_port}"
    )
    assert broker["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
    assert broker["inter.broker.listener.name"] == "SASL_SSL"
    assert broker["sasl.enabled.mechanisms"] == "PLAIN"
    jaas = broker["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert 'username="icefjord" password="k4fka" user_icefjord="k4fka";' in jaas
    assert broker["ssl.keystore.password"] == "st0re"
    assert broker["ssl.truststore.location"] == str(s.security_files.ca_pem)


def test_without_security_the_broker_is_plaintext_and_holds_no_password(tmp_path: Path) -> None:
    s = LocalSettings(state_dir=tmp_path / "state")
    broker = broker_properties(s)
    assert broker["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{s.kafka_port}"
    assert not [key for key in broker if key.startswith(("sasl", "ssl", "listener.name"))]
    assert registry_properties(s) == {}
    assert s.registry_url.startswith("http://")
    assert s.kafka_settings().client_config()["security.protocol"] == "PLAINTEXT"


def test_the_registry_answers_https_only_and_asks_every_path_for_credentials(
    tmp_path: Path,
) -> None:
    s = secured(tmp_path)
    registry = registry_properties(s)
    assert registry["quarkus.http.insecure-requests"] == "disabled"
    assert registry["quarkus.http.ssl.certificate.key-store-password"] == "st0re"
    assert registry["quarkus.http.auth.basic"] == "true"
    assert registry["quarkus.security.users.embedded.users.icefjord"] == "r3g"
    assert registry["quarkus.http.auth.permission.authenticated.paths"] == "/*"
    assert registry["quarkus.http.auth.permission.authenticated.policy"] == "authenticated"
    assert s.registry_url == f"https://127.0.0.1:{s.registry_port}/apis/ccompat/v7"


def test_the_connect_worker_and_its_connectors_clients_use_sasl_ssl(tmp_path: Path) -> None:
    s = secured(tmp_path)
    worker = KafkaConnect(s, connect_dist_for(s)).worker_properties()
    for prefix in ("", "producer.", "consumer.", "admin."):
        assert worker[f"{prefix}security.protocol"] == "SASL_SSL"
        assert worker[f"{prefix}sasl.mechanism"] == "PLAIN"
        assert 'password="k4fka"' in worker[f"{prefix}sasl.jaas.config"]
        assert worker[f"{prefix}ssl.truststore.type"] == "PEM"
        assert worker[f"{prefix}ssl.truststore.location"] == str(s.security_files.ca_pem)


def test_every_service_reads_the_credentials_from_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = secured(tmp_path)
    ca = str(s.security_files.ca_pem)
    for spec in SERVICES:
        env = service_env(spec, s)
        assert env[f"{spec.env_prefix}KAFKA__SASL_PASSWORD"] == "k4fka"
        assert env[f"{spec.env_prefix}REGISTRY__BASIC_AUTH_USER_INFO"] == "icefjord:r3g"
    for key, value in {**service_env(SERVICES[0], s), **service_env(SERVICES[1], s)}.items():
        monkeypatch.setenv(key, value)
    for parsed in (NormalizerSettings(), WatcherSettings()):
        config = parsed.kafka.client_config()
        assert config["security.protocol"] == "SASL_SSL"
        assert config["sasl.username"] == "icefjord" and config["sasl.password"] == "k4fka"
        assert config["ssl.ca.location"] == ca
        registry = parsed.registry.client_config()
        assert registry["url"] == s.registry_url
        assert registry["basic.auth.user.info"] == "icefjord:r3g"
        assert registry["ssl.ca.location"] == ca


def test_registry_settings_without_a_ca_trust_the_system() -> None:
    plain = RegistrySettings()
    assert "ssl.ca.location" not in plain.client_config()
    assert plain.basic_auth() is None
    context = plain.ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_a_secured_client_before_the_first_up_is_told_what_to_do(tmp_path: Path) -> None:
    s = secured(tmp_path, write_secrets=False)
    with pytest.raises(SecurityError, match="ICEFJORD_LOCAL_SECURITY=sasl_ssl icefjord local up"):
        s.kafka_settings()
    with pytest.raises(SecurityError, match="no credentials"):
        s.registry_settings()
