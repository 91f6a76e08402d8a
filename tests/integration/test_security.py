"""The local stack with security on (``make test-secure``, ``ICEFJORD_TEST_SECURITY=sasl_ssl``):
Kafka's client listener is SASL_SSL, the registry answers HTTPS with basic auth only, and
no secret is on a process's command line. Skipped on a stack without security."""

from __future__ import annotations

import http.client
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from harness import Stack, command_lines_with, stack_secrets
from pydantic import SecretStr

from icefjord.local.components import basic_auth_header
from icefjord.local.settings import LocalSettings
from icefjord.local.smoke import kafka_round_trip, registry_round_trip
from shared.registry import make_registry_client


@pytest.fixture
def secured(stack: Stack) -> Iterator[LocalSettings]:
    if stack.local is None or not stack.local.settings.secured:
        pytest.skip("needs the session's own stack with ICEFJORD_TEST_SECURITY=sasl_ssl")
    yield stack.local.settings


def _admin_errors(config: dict[str, object]) -> list[KafkaError]:
    """Ask for metadata with ``config``; the client's errors (the request must fail)."""
    errors: list[KafkaError] = []
    admin = AdminClient({**config, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=8)
    admin.poll(1)  # serves the error callbacks
    return errors


def test_a_plaintext_client_is_refused(secured: LocalSettings) -> None:
    _admin_errors({"bootstrap.servers": secured.bootstrap_servers})


def test_a_wrong_password_is_refused_as_such(secured: LocalSettings) -> None:
    wrong = secured.kafka_settings().model_copy(update={"sasl_password": SecretStr("wrong")})
    errors = _admin_errors(wrong.client_config())
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_an_untrusted_broker_certificate_is_refused(secured: LocalSettings) -> None:
    """A client that trusts only the system's CAs does not talk to the stack's broker."""
    config = secured.kafka_settings().client_config()
    del config["ssl.ca.location"]
    errors = _admin_errors(config)
    assert any("certificate verify failed" in e.str() for e in errors), errors


def test_the_stack_user_produces_and_consumes(stack: Stack, secured: LocalSettings) -> None:
    assert stack.kafka.security_protocol == "SASL_SSL"
    kafka_round_trip(stack.kafka)  # raises unless the record came back


def test_the_registry_answers_only_https_with_credentials(
    stack: Stack, secured: LocalSettings
) -> None:
    registry = stack.registry
    assert registry.url.startswith("https://")
    subjects = f"{registry.url}/subjects"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(subjects, timeout=10, context=registry.ssl_context())
    assert refused.value.code == 401

    plain = subjects.replace("https://", "http://", 1)
    request = urllib.request.Request(plain, headers=basic_auth_header(registry))
    with pytest.raises((OSError, http.client.HTTPException)):
        urllib.request.urlopen(request, timeout=10)

    system_trust = ssl.create_default_context()
    request = urllib.request.Request(subjects, headers=basic_auth_header(registry))
    with pytest.raises(urllib.error.URLError) as untrusted:
        urllib.request.urlopen(request, timeout=10, context=system_trust)
    assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)

    wrong = registry.model_copy(update={"basic_auth_user_info": SecretStr("icefjord:wrong")})
    with pytest.raises(SchemaRegistryError) as denied:
        make_registry_client(wrong).get_subjects()
    assert denied.value.http_status_code == 401

    registry_round_trip(registry)


def test_no_secret_is_on_a_command_line_and_their_files_are_private(
    secured: LocalSettings,
) -> None:
    secrets = stack_secrets(secured)
    assert command_lines_with(secrets) == []
    files = [
        secured.security_files.secrets_file,
        secured.security_files.keystore,
        secured.state / "kafka" / "server.properties",
        secured.state / "registry" / "config" / "application.properties",
    ]
    for path in files:
        assert path.stat().st_mode & 0o077 == 0, path
    # The files hold them; the command lines, checked above, would have too if passed there.
    assert secrets[1] in files[2].read_text()
    assert secrets[2] in files[3].read_text()
