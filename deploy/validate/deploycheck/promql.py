"""Just enough PromQL reading to check metric names and label matchers against the contract.

This is a scanner, not a parser: it finds every vector selector whose metric name starts with
``icefjord`` (``icefjord_...`` series and ``icefjord:...`` recording rules) and the label
names of its matchers. Grafana variables (``$table``, ``${table}``, ``$__rate_interval``) are
accepted where PromQL takes a string or a duration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deploycheck.contract import Contract

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_SELECTOR = re.compile(r"(?<![\w:$])(icefjord[a-zA-Z0-9_:]*)\s*(\{[^{}]*\})?")
_MATCHER = re.compile(r"^\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*\"S(\d+)\"\s*$")
# A name followed by an opening parenthesis is a function call, not a metric.
_FUNCTION_CALL = re.compile(r"\s*\(")


@dataclass(frozen=True)
class Selector:
    """A vector selector: metric name, the label names its matchers use, and the values of
    its equality matchers (``=`` and ``!=``) by label."""

    name: str
    labels: tuple[str, ...]
    equals: tuple[tuple[str, str], ...] = ()


def selectors(expr: str) -> tuple[list[Selector], list[str]]:
    """The ``icefjord*`` selectors in ``expr``, and the matchers that could not be read."""
    literals: list[str] = []

    def mask(match: re.Match[str]) -> str:
        literals.append(match.group(0)[1:-1])
        return f'"S{len(literals) - 1}"'

    masked = _STRING.sub(mask, expr)
    found: list[Selector] = []
    unreadable: list[str] = []
    for match in _SELECTOR.finditer(masked):
        name, braces = match.group(1), match.group(2)
        if braces is None and _FUNCTION_CALL.match(masked, match.end()):
            continue  # an identifier used as a function name, not a metric
        labels: list[str] = []
        equals: list[tuple[str, str]] = []
        if braces:
            for part in filter(None, (p.strip() for p in braces[1:-1].split(","))):
                matcher = _MATCHER.match(part)
                if matcher is None:
                    unreadable.append(part)
                    continue
                labels.append(matcher.group(1))
                if matcher.group(2) in {"=", "!="}:
                    equals.append((matcher.group(1), literals[int(matcher.group(3))]))
        found.append(Selector(name=name, labels=tuple(labels), equals=tuple(equals)))
    return found, unreadable


def check_expr(expr: str, contract: Contract, recorded: frozenset[str]) -> list[str]:
    """Messages for names in ``expr`` missing from the contract (or the recording rules
    ``recorded``) and for label matchers a metric does not have."""
    messages: list[str] = []
    found, unreadable = selectors(expr)
    messages.extend(f"unreadable label matcher {part!r}" for part in unreadable)
    for selector in found:
        if selector.name in recorded:
            continue
        family = contract.family(selector.name)
        if family is None:
            messages.append(f"metric {selector.name} is not in the contract")
            continue
        allowed = family.series_labels(selector.name)
        for label in selector.labels:
            if label not in allowed:
                messages.append(
                    f"metric {selector.name} has no label {label!r} (has {sorted(allowed)})"
                )
        for label, value in selector.equals:
            known = contract.label_values.get(label)
            if known is not None and value not in known and not value.startswith("$"):
                messages.append(
                    f"metric {selector.name}: {label}={value!r} is not a value it takes "
                    f"({sorted(known)})"
                )
    return messages


def metric_families(exprs: list[str], contract: Contract) -> set[str]:
    """Contract metric families referenced by any of ``exprs``."""
    families: set[str] = set()
    for expr in exprs:
        for selector in selectors(expr)[0]:
            family = contract.family(selector.name)
            if family is not None:
                families.add(family.name)
    return families
