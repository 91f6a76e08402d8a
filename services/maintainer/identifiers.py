"""Strict parsing of what a maintenance request may put into Spark SQL.

Everything that reaches a ``CALL`` statement passes through here first: table identifiers
(``<namespace>.<table>``, each part ``[A-Za-z_][A-Za-z0-9_]*``), partition filters (a small
grammar of ANDed comparisons, see :func:`parse_filter`) and string literals. Nothing else is
ever pasted into SQL: what goes out is rendered from the parsed value, never the input text,
so a request cannot smuggle a quote, a comment or a second statement through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeAlias

from shared.errors import IcefjordError

__all__ = [
    "Comparison",
    "IsNull",
    "MalformedFilterError",
    "MalformedIdentifierError",
    "PartitionFilter",
    "TableId",
    "Term",
    "Value",
    "parse_filter",
    "parse_table",
    "quote_identifier",
    "sql_string",
]

_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_NAME_RE = re.compile(_NAME)
_TABLE_RE = re.compile(rf"({_NAME})\.({_NAME})")


class MalformedIdentifierError(IcefjordError, ValueError):
    """A table or column identifier that does not match the strict pattern."""


class MalformedFilterError(IcefjordError, ValueError):
    """A partition filter outside the accepted grammar."""


@dataclass(frozen=True, slots=True, order=True)
class TableId:
    """A validated ``<namespace>.<table>`` identifier."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}.{self.name}"

    def quoted(self, catalog: str | None = None) -> str:
        """The identifier for Spark SQL, each part in backticks, optionally catalog-qualified."""
        parts = ([catalog] if catalog is not None else []) + [self.namespace, self.name]
        return ".".join(quote_identifier(part) for part in parts)


def parse_table(text: str) -> TableId:
    """Parse ``<namespace>.<table>``; raises MalformedIdentifierError for anything else."""
    match = _TABLE_RE.fullmatch(text)
    if match is None:
        raise MalformedIdentifierError(
            f"malformed table identifier {text[:200]!r}: expected <namespace>.<table>, each "
            "part letters, digits and underscores, not starting with a digit"
        )
    return TableId(match.group(1), match.group(2))


def quote_identifier(name: str) -> str:
    """``name`` in backticks; raises MalformedIdentifierError unless it is a plain name."""
    if _NAME_RE.fullmatch(name) is None:
        raise MalformedIdentifierError(f"malformed identifier {name[:200]!r}")
    return f"`{name}`"


def sql_string(text: str) -> str:
    """A Spark SQL string literal holding ``text`` exactly.

    Backslashes and single quotes are escaped; control characters are refused
    (ValueError), since no identifier or filter accepted here contains one.
    """
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise ValueError("control characters are not allowed in SQL string literals")
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


Value: TypeAlias = str | int | bool
Operator: TypeAlias = Literal["=", "!=", "<", "<=", ">", ">="]
_OPERATORS: tuple[Operator, ...] = ("<=", ">=", "!=", "=", "<", ">")


@dataclass(frozen=True, slots=True)
class Comparison:
    """``column <op> value``."""

    column: str
    op: Operator
    value: Value


@dataclass(frozen=True, slots=True)
class IsNull:
    """``column IS NULL`` or, negated, ``column IS NOT NULL``."""

    column: str
    negated: bool = False


Term: TypeAlias = Comparison | IsNull


def _literal(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return f"'{value}'"


@dataclass(frozen=True, slots=True)
class PartitionFilter:
    """A conjunction of terms over partition source columns (at least one term)."""

    terms: tuple[Term, ...]

    def __post_init__(self) -> None:
        if not self.terms:
            raise MalformedFilterError("a partition filter needs at least one term")

    @property
    def columns(self) -> frozenset[str]:
        return frozenset(term.column for term in self.terms)

    def render(self, *, quoted: bool = False) -> str:
        """The canonical text: ``region = 'eu' AND day >= 3``; ``quoted`` puts column names
        in backticks (the form that goes into SQL). ``parse_filter(f.render()) == f``."""

        def column(name: str) -> str:
            return quote_identifier(name) if quoted else name

        parts = []
        for term in self.terms:
            if isinstance(term, IsNull):
                parts.append(f"{column(term.column)} IS {'NOT ' if term.negated else ''}NULL")
            else:
                parts.append(f"{column(term.column)} {term.op} {_literal(term.value)}")
        return " AND ".join(parts)


_TOKEN_RE = re.compile(
    r"""\s*(?:
        (?P<string>'[^'\\\x00-\x1f\x7f]*')
      | (?P<number>-?\d{1,18}(?![\w.]))
      | (?P<op><=|>=|!=|=|<|>)
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = frozenset({"AND", "IS", "NOT", "NULL", "TRUE", "FALSE"})
MAX_FILTER_LENGTH = 1000


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    stripped = text.rstrip()
    while position < len(stripped):
        match = _TOKEN_RE.match(stripped, position)
        if match is None or match.end() == position:
            raise MalformedFilterError(
                f"unexpected text at {position} in partition filter: {stripped[position:][:40]!r}"
            )
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


def parse_filter(text: str) -> PartitionFilter:
    """Parse a partition filter; raises MalformedFilterError outside this grammar::

        filter := term ("AND" term)*
        term   := column op literal | column "IS" ["NOT"] "NULL"
        op     := = | != | < | <= | > | >=
        literal:= 'text without quotes, backslashes or control characters'
                | integer | true | false

    Keywords are case-insensitive; columns are plain names (no functions, no parentheses,
    no OR: a maintenance scope is a partition, not a query).
    """
    if len(text) > MAX_FILTER_LENGTH:
        raise MalformedFilterError(f"partition filter longer than {MAX_FILTER_LENGTH} characters")
    tokens = _tokens(text)
    terms: list[Term] = []
    index = 0

    def take() -> tuple[str, str]:
        nonlocal index
        if index >= len(tokens):
            raise MalformedFilterError("partition filter ends too early")
        token = tokens[index]
        index += 1
        return token

    def column() -> str:
        kind, text = take()
        if kind != "word" or text.upper() in _KEYWORDS:
            raise MalformedFilterError(f"expected a column name, found {text!r}")
        return text

    while True:
        name = column()
        kind, token = take()
        if kind == "word" and token.upper() == "IS":
            kind, token = take()
            negated = kind == "word" and token.upper() == "NOT"
            if negated:
                kind, token = take()
            if not (kind == "word" and token.upper() == "NULL"):
                raise MalformedFilterError(f"expected NULL after IS, found {token!r}")
            terms.append(IsNull(name, negated))
        elif kind == "op":
            terms.append(Comparison(name, _operator(token), _value(take())))
        else:
            raise MalformedFilterError(f"expected an operator after {name!r}, found {token!r}")
        if index == len(tokens):
            return PartitionFilter(tuple(terms))
        kind, token = take()
        if not (kind == "word" and token.upper() == "AND"):
            raise MalformedFilterError(f"expected AND between terms, found {token!r}")


def _operator(token: str) -> Operator:
    for op in _OPERATORS:
        if token == op:
            return op
    raise MalformedFilterError(f"unknown operator {token!r}")  # pragma: no cover


def _value(token: tuple[str, str]) -> Value:
    kind, text = token
    if kind == "string":
        return text[1:-1]
    if kind == "number":
        return int(text)
    if kind == "word" and text.upper() in ("TRUE", "FALSE"):
        return text.upper() == "TRUE"
    raise MalformedFilterError(f"expected a literal, found {text!r}")
