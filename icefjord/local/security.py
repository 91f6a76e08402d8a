"""The local stack's TLS certificates and passwords (``security=sasl_ssl``).

Made once, at the first ``local up`` with security on, under ``<state_dir>/security``
(mode 700) with the JDK's ``keytool``, and reused across ``down``/``up``:

- ``ca.p12``: a certificate authority of this state directory alone;
- ``server.p12``: the key and the CA-signed certificate (SAN ``IP:<host>``, ``IP:127.0.0.1``,
  ``DNS:localhost``) that Kafka's SASL_SSL listener and the registry's HTTPS port present;
- ``ca.pem``: the CA certificate, for librdkafka's ``ssl.ca.location``, Python's ``ssl``
  and Java's ``ssl.truststore.type=PEM``;
- ``secrets.json`` (mode 600): the key stores' password, the Kafka user's and the
  registry user's.

Passwords reach ``keytool`` through its environment (``-storepass:env``), never its
arguments: a process's command line is readable by every user of the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from shared.errors import IcefjordError

_STOREPASS_ENV = "ICEFJORD_KEYTOOL_STOREPASS"
_VALIDITY_DAYS = "3650"


class SecurityError(IcefjordError, RuntimeError):
    """The certificates could not be made, or the stack's secrets are missing."""


@dataclass(frozen=True)
class LocalSecrets:
    """The passwords of one state directory's stack."""

    store_password: SecretStr
    kafka_password: SecretStr
    registry_password: SecretStr


@dataclass(frozen=True)
class SecurityFiles:
    """Where one state directory keeps its certificates and secrets."""

    home: Path

    @property
    def ca_store(self) -> Path:
        return self.home / "ca.p12"

    @property
    def keystore(self) -> Path:
        return self.home / "server.p12"

    @property
    def ca_pem(self) -> Path:
        return self.home / "ca.pem"

    @property
    def secrets_file(self) -> Path:
        return self.home / "secrets.json"

    def ready(self) -> bool:
        return all(p.is_file() for p in (self.keystore, self.ca_pem, self.secrets_file))

    def secrets(self) -> LocalSecrets:
        """The stack's passwords; raises SecurityError before the first ``local up``."""
        try:
            raw = json.loads(self.secrets_file.read_text())
        except FileNotFoundError as exc:
            raise SecurityError(
                f"no credentials in {self.home}: start the stack with security on first "
                "(ICEFJORD_LOCAL_SECURITY=sasl_ssl icefjord local up)"
            ) from exc
        return LocalSecrets(**{key: SecretStr(value) for key, value in raw.items()})

    def ensure(self, host: str) -> bool:
        """Make the CA, the server's key store, ``ca.pem`` and the passwords unless they are
        there; True when made now. Raises SecurityError when ``keytool`` fails."""
        if self.ready():
            return False
        self.home.mkdir(parents=True, exist_ok=True)
        self.home.chmod(0o700)
        for stale in (self.ca_store, self.keystore, self.ca_pem, self.home / "server.csr"):
            stale.unlink(missing_ok=True)
        made = LocalSecrets(*(SecretStr(secrets.token_urlsafe(24)) for _ in range(3)))
        for step in keytool_steps(self, host):
            _keytool(step, made.store_password)
        (self.home / "server.csr").unlink(missing_ok=True)
        (self.home / "server.pem").unlink(missing_ok=True)
        for store in (self.ca_store, self.keystore):
            store.chmod(0o600)  # the private keys; ca.pem stays readable
        # Written last: its presence says the rest is complete.
        values = {
            "store_password": made.store_password.get_secret_value(),
            "kafka_password": made.kafka_password.get_secret_value(),
            "registry_password": made.registry_password.get_secret_value(),
        }
        fd = os.open(self.secrets_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(values, out)
        return True


def subject_alternative_names(host: str) -> str:
    """The server certificate's SAN: the stack's host, loopback by address and by name."""
    names = ["IP:127.0.0.1", "DNS:localhost"]
    if host not in ("127.0.0.1", "localhost"):
        kind = "IP" if host.replace(".", "").isdigit() or ":" in host else "DNS"
        names.insert(0, f"{kind}:{host}")
    return ",".join(names)


def keytool_steps(files: SecurityFiles, host: str) -> list[list[str]]:
    """The ``keytool`` arguments (without the program) that make the CA and the signed server
    certificate. Every step names the password as ``:env``, none carries it."""
    store = ["-storetype", "PKCS12", "-storepass:env", _STOREPASS_ENV]
    ca = ["-keystore", str(files.ca_store), *store]
    server = ["-keystore", str(files.keystore), *store]
    csr = str(files.home / "server.csr")
    signed = str(files.home / "server.pem")
    key = ["-keyalg", "RSA", "-keysize", "2048", "-validity", _VALIDITY_DAYS]
    return [
        ["-genkeypair", "-alias", "ca", *key, "-dname", "CN=Icefjord local CA",
         "-ext", "bc:c=ca:true", "-ext", "ku:c=keyCertSign,cRLSign", *ca],
        ["-exportcert", "-rfc", "-alias", "ca", "-file", str(files.ca_pem), *ca],
        ["-genkeypair", "-alias", "server", *key, "-dname", "CN=localhost", *server],
        ["-certreq", "-alias", "server", "-file", csr, *server],
        ["-gencert", "-alias", "ca", "-infile", csr, "-outfile", signed, "-rfc",
         "-validity", _VALIDITY_DAYS, "-ext", f"SAN={subject_alternative_names(host)}",
         "-ext", "ku:c=digitalSignature,keyEncipherment", "-ext", "eku=serverAuth", *ca],
        ["-importcert", "-noprompt", "-alias", "ca", "-file", str(files.ca_pem), *server],
        ["-importcert", "-alias", "server", "-file", signed, *server],
    ]  # fmt: skip


def _keytool(arguments: Sequence[str], password: SecretStr) -> None:
    try:
        done = subprocess.run(
            ["keytool", *arguments],
            env={**os.environ, _STOREPASS_ENV: password.get_secret_value()},
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise SecurityError("keytool is not on PATH; install a JDK (Java 17)") from exc
    if done.returncode != 0:
        raise SecurityError(
            f"keytool {arguments[0]} exited {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-1000:]}"
        )


def jaas_plain(username: str, password: SecretStr, *, server: bool = False) -> str:
    """Kafka's ``sasl.jaas.config`` for SASL/PLAIN; ``server`` adds the user table the broker
    checks clients against (one user: the stack's own)."""
    secret = password.get_secret_value()
    users = f' user_{username}="{secret}"' if server else ""
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{username}" password="{secret}"{users};'
    )
