"""Icefjord's wire contracts: Avro schemas and the topic catalog, as packaged data.

Schemas live in ``contracts/avro/<name>.v<N>.avsc`` (N = 1, 2, ...; a higher N is a later
version that reads everything the earlier ones wrote, see ``COMPATIBILITY.md``). The topic
catalog lives in ``contracts/topics.toml``. Files are read through :mod:`importlib.resources`,
so the API works from a source tree and from an installed wheel alike.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import fastavro

from shared.errors import IcefjordError

__all__ = [
    "TopicSpec",
    "UnknownSchemaError",
    "load_schema",
    "parse_topic_catalog",
    "parsed_schema",
    "schema_names",
    "schema_versions",
    "topic_catalog",
]

_SCHEMA_FILE = re.compile(r"^(?P<name>[a-z][a-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")
_PLACEHOLDER = re.compile(r"<[a-z_]+>")


class UnknownSchemaError(IcefjordError, LookupError):
    """A schema name or version that is not packaged in ``contracts/avro``."""


def _root() -> Traversable:
    return resources.files(__name__)


@functools.cache
def _schema_files() -> dict[str, dict[int, str]]:
    """Map each schema name to ``{version: file name}``, read once per process."""
    found: dict[str, dict[int, str]] = {}
    for entry in _root().joinpath("avro").iterdir():
        match = _SCHEMA_FILE.match(entry.name)
        if match is not None:
            found.setdefault(match["name"], {})[int(match["version"])] = entry.name
    return found


def schema_names() -> list[str]:
    """Names of all packaged schemas (``"change_record"``, ``"control_event"``, ...), sorted."""
    return sorted(_schema_files())


def schema_versions(name: str) -> list[int]:
    """Versions packaged for ``name``, ascending; raises :class:`UnknownSchemaError`."""
    try:
        return sorted(_schema_files()[name])
    except KeyError:
        raise UnknownSchemaError(f"no schema named {name!r}") from None


def _resolve_version(name: str, version: int | None) -> int:
    versions = schema_versions(name)
    if version is None:
        return versions[-1]
    if version not in versions:
        raise UnknownSchemaError(f"schema {name!r} has no version {version} (has {versions})")
    return version


@functools.cache
def _schema_text(name: str, version: int) -> str:
    return _root().joinpath("avro", _schema_files()[name][version]).read_text(encoding="utf-8")


def load_schema(name: str, version: int | None = None) -> dict[str, Any]:
    """The schema ``name`` at ``version`` (latest when None) as a fresh JSON dict.

    Each call returns a new dict, so callers may modify it. Custom properties such as
    ``icefjord.key`` are kept. Raises :class:`UnknownSchemaError` for an unknown name or version.
    """
    loaded: dict[str, Any] = json.loads(_schema_text(name, _resolve_version(name, version)))
    return loaded


@functools.cache
def _parsed(name: str, version: int) -> Any:
    return fastavro.parse_schema(load_schema(name, version))


def parsed_schema(name: str, version: int | None = None) -> Any:
    """The schema parsed by :func:`fastavro.parse_schema`, cached; treat it as read-only."""
    return _parsed(name, _resolve_version(name, version))


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    """One entry of ``topics.toml``: a literal topic or a ``<placeholder>`` pattern.

    ``managed`` is False for topics Icefjord only reads and never creates (Debezium's), whose
    ``partitions``, ``cleanup_policy``, ``retention_ms`` and replication are then None.
    ``retention_ms`` of -1 means kept forever. ``headers`` lists the Kafka headers Icefjord
    sets on every record of the topic.
    """

    name: str
    managed: bool
    purpose: str
    key: str
    value_format: str
    value_schema: str
    value_subject: str | None = None
    partitions: int | None = None
    cleanup_policy: str | None = None
    retention_ms: int | None = None
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    max_message_bytes: int | None = None
    producers: tuple[str, ...] = ()
    consumers: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    notes: str = ""

    @property
    def is_pattern(self) -> bool:
        """True when ``name`` holds ``<placeholders>``."""
        return _PLACEHOLDER.search(self.name) is not None

    def matches(self, topic: str) -> bool:
        """Whether the concrete ``topic`` is this entry; a placeholder is one dot-free segment."""
        literal_parts = _PLACEHOLDER.split(self.name)
        regex = "[^.]+".join(re.escape(part) for part in literal_parts)
        return re.fullmatch(regex, topic) is not None


_STR_FIELDS = ("name", "purpose", "key", "value_format", "value_schema")
_OPTIONAL_STR_FIELDS = ("value_subject", "cleanup_policy", "notes")
_OPTIONAL_INT_FIELDS = (
    "partitions",
    "retention_ms",
    "replication_factor",
    "min_insync_replicas",
    "max_message_bytes",
)
_LIST_FIELDS = ("producers", "consumers", "headers")


def _topic_spec(entry: dict[str, Any]) -> TopicSpec:
    """Build a :class:`TopicSpec` from one ``[[topic]]`` table; raises ValueError on bad keys."""
    known = {"managed", *_STR_FIELDS, *_OPTIONAL_STR_FIELDS, *_OPTIONAL_INT_FIELDS, *_LIST_FIELDS}
    unknown = set(entry) - known
    if unknown:
        raise ValueError(f"topic {entry.get('name')!r}: unknown keys {sorted(unknown)}")
    missing = [field for field in ("managed", *_STR_FIELDS) if field not in entry]
    if missing:
        raise ValueError(f"topic {entry.get('name')!r}: missing keys {missing}")
    for field in (*_STR_FIELDS, *_OPTIONAL_STR_FIELDS):
        if field in entry and not isinstance(entry[field], str):
            raise ValueError(f"topic {entry['name']!r}: {field} must be a string")
    for field in _OPTIONAL_INT_FIELDS:
        value = entry.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"topic {entry['name']!r}: {field} must be an integer")
    if not isinstance(entry["managed"], bool):
        raise ValueError(f"topic {entry['name']!r}: managed must be true or false")
    lists = {field: tuple(str(item) for item in entry.get(field, ())) for field in _LIST_FIELDS}
    return TopicSpec(
        name=entry["name"],
        managed=entry["managed"],
        purpose=entry["purpose"],
        key=entry["key"],
        value_format=entry["value_format"],
        value_schema=entry["value_schema"],
        value_subject=entry.get("value_subject"),
        partitions=entry.get("partitions"),
        cleanup_policy=entry.get("cleanup_policy"),
        retention_ms=entry.get("retention_ms"),
        replication_factor=entry.get("replication_factor"),
        min_insync_replicas=entry.get("min_insync_replicas"),
        max_message_bytes=entry.get("max_message_bytes"),
        producers=lists["producers"],
        consumers=lists["consumers"],
        headers=lists["headers"],
        notes=entry.get("notes", ""),
    )


def parse_topic_catalog(text: str) -> list[TopicSpec]:
    """Parse TOML text with ``[[topic]]`` tables into specs, in file order.

    Raises ValueError on malformed TOML, unknown or missing keys, wrong value types, or a
    name that appears twice.
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"topic catalog is not valid TOML: {exc}") from exc
    specs = [_topic_spec(entry) for entry in document.get("topic", [])]
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"topic catalog names repeated: {duplicates}")
    return specs


@functools.cache
def _catalog() -> tuple[TopicSpec, ...]:
    text = _root().joinpath("topics.toml").read_text(encoding="utf-8")
    return tuple(parse_topic_catalog(text))


def topic_catalog() -> list[TopicSpec]:
    """Every topic Icefjord reads or writes, from the packaged ``topics.toml``."""
    return list(_catalog())
