"""Which tables an operator command can name: pure, so that whatever publishes a command
(``icefjord control``, icefjord-console) checks it as the writer does, without importing the
writer."""

from __future__ import annotations

import re

from shared.events import ALL_TABLES
from shared.settings import CHANGES_TOPIC_PREFIX

__all__ = ["check_command_table"]

# What the normalizer names a changes topic (``icefjord.changes.<namespace>.<table>``, each
# part letters, digits, ``_`` and ``-``; Kafka allows 249 characters in a topic name).
_TABLE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_MAX_TABLE = 249 - len(CHANGES_TOPIC_PREFIX)


def check_command_table(text: str) -> str:
    """``text`` when it names a table an operator command can address: ``"*"`` or
    ``<namespace>.<table>`` as the writer's tables are named. Raises ValueError saying why."""
    if text == ALL_TABLES:
        return text
    if not text:
        raise ValueError("no table: give <namespace>.<table>, or '*' for every table")
    if _TABLE.fullmatch(text) is None:
        raise ValueError(
            f"{text[:200]!r} is not <namespace>.<table> (two parts joined by one dot, each "
            "letters, digits, '_' or '-'), nor '*' for every table"
        )
    if len(text) > _MAX_TABLE:
        raise ValueError(f"{text[:40]!r}... is longer than a table name can be ({_MAX_TABLE})")
    return text
