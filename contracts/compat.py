"""Structural check of the evolution rules in ``COMPATIBILITY.md`` between two Avro schemas.

This complements, not replaces, real schema resolution (reading old data with the new
schema): it also flags changes that resolution tolerates but our rules forbid, such as a
reordered enum, a removed field old readers cannot fill, or a union branch inserted in front.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastavro.schema import expand_schema

__all__ = ["backward_violations"]

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# Avro's schema-resolution promotions: (writer type, reader type).
_PROMOTIONS = frozenset(
    {
        ("int", "long"),
        ("int", "float"),
        ("int", "double"),
        ("long", "float"),
        ("long", "double"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    }
)
_NAMED = frozenset({"record", "error", "enum", "fixed"})


def backward_violations(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Every way ``new`` breaks our rules as the successor of ``old``; empty when it is fine.

    Rules (see ``COMPATIBILITY.md``): fields are added only with a default; a field is removed
    only if it had a default; a rename keeps the old name in ``aliases``; types change only by
    Avro promotion or decimal precision growth; enum symbols and union branches are only
    appended; an enum keeps its default; a named type keeps its name or aliases it.
    Each violation is a readable string starting with the dotted path of the offending node.
    """
    violations: list[str] = []
    _check(expand_schema(dict(old)), expand_schema(dict(new)), "", violations)
    return violations


def _base(node: Any) -> str:
    """The Avro type of an expanded schema node: a primitive, a complex type or "union"."""
    if isinstance(node, list):
        return "union"
    if isinstance(node, str):
        return node
    base = node["type"]
    return base if isinstance(base, str) else _base(base)


def _signature(node: Any) -> str:
    """Identity of a union branch: the full name of a named type, else its base type."""
    if isinstance(node, dict) and node.get("type") in _NAMED:
        return str(node["name"])
    return _base(node)


def _names(node: Any) -> set[str]:
    """Names a named type answers to: its full name and its aliases (qualified or not)."""
    namespace = str(node["name"]).rpartition(".")[0]
    aliases = {
        alias if "." in alias else f"{namespace}.{alias}".lstrip(".")
        for alias in node.get("aliases", [])
    }
    return {str(node["name"]), *aliases}


def _readable(old: Any, new: Any) -> bool:
    """Whether a reader of type ``new`` can resolve data of non-union type ``old`` at all."""
    old_base, new_base = _base(old), _base(new)
    if old_base in _NAMED and new_base == old_base:
        return str(old["name"]) in _names(new)
    return old_base == new_base or (old_base, new_base) in _PROMOTIONS


def _check(old: Any, new: Any, path: str, out: list[str]) -> None:
    if isinstance(old, list) or isinstance(new, list):
        _check_union(old, new, path, out)
        return
    old_base, new_base = _base(old), _base(new)
    if not _readable(old, new):
        old_label = old.get("name", old_base) if isinstance(old, dict) else old_base
        new_label = new.get("name", new_base) if isinstance(new, dict) else new_base
        out.append(f"{path or '<root>'}: type changed from {old_label} to {new_label}")
        return
    if old_base in _PRIMITIVES:
        _check_logical(old, new, path, out)
    elif old_base in ("record", "error"):
        _check_record(old, new, path, out)
    elif old_base == "enum":
        _check_enum(old, new, path, out)
    elif old_base == "fixed" and old["size"] != new["size"]:
        out.append(f"{path}: fixed size changed from {old['size']} to {new['size']}")
    elif old_base == "array":
        _check(old["items"], new["items"], f"{path}[]", out)
    elif old_base == "map":
        _check(old["values"], new["values"], f"{path}{{}}", out)


def _same_branch(old: Any, new: Any) -> bool:
    """Whether union branch ``new`` is ``old`` itself (same type, or a named type aliasing it)."""
    if _signature(old) == _signature(new):
        return True
    return _base(old) in _NAMED and _base(new) == _base(old) and str(old["name"]) in _names(new)


def _check_union(old: Any, new: Any, path: str, out: list[str]) -> None:
    old_branches = old if isinstance(old, list) else [old]
    new_branches = new if isinstance(new, list) else [new]
    if isinstance(old, list) and isinstance(new, list):
        kept = len(new_branches) >= len(old_branches) and all(
            _same_branch(o, n) for o, n in zip(old_branches, new_branches, strict=False)
        )
        if not kept:
            old_sigs = [_signature(branch) for branch in old_branches]
            new_sigs = [_signature(branch) for branch in new_branches]
            out.append(f"{path}: union branches {old_sigs} not kept as a prefix of {new_sigs}")
    for branch in old_branches:
        same = [b for b in new_branches if _same_branch(branch, b)]
        readable = same or [b for b in new_branches if _readable(branch, b)]
        if not readable:
            out.append(f"{path}: union branch {_signature(branch)} has no readable successor")
        else:
            _check(branch, readable[0], path, out)


def _check_logical(old: Any, new: Any, path: str, out: list[str]) -> None:
    old_logical = old.get("logicalType") if isinstance(old, dict) else None
    new_logical = new.get("logicalType") if isinstance(new, dict) else None
    if old_logical != new_logical:
        out.append(f"{path}: logical type changed from {old_logical} to {new_logical}")
    elif old_logical == "decimal":
        if old.get("scale", 0) != new.get("scale", 0):
            out.append(f"{path}: decimal scale changed from {old.get('scale', 0)}")
        if new["precision"] < old["precision"]:
            out.append(f"{path}: decimal precision narrowed from {old['precision']}")


def _check_record(old: Any, new: Any, path: str, out: list[str]) -> None:
    prefix = f"{path}." if path else ""
    matched: set[str] = set()
    for field in new["fields"]:
        answers_to = {field["name"], *field.get("aliases", [])}
        previous = [f for f in old["fields"] if f["name"] in answers_to]
        if previous:
            matched.add(previous[0]["name"])
            _check(previous[0]["type"], field["type"], f"{prefix}{field['name']}", out)
        elif "default" not in field:
            out.append(f"{prefix}{field['name']}: field added without a default")
        elif field["default"] is None and _first_branch(field["type"]) != "null":
            out.append(f"{prefix}{field['name']}: default null but first type is not null")
    for field in old["fields"]:
        if field["name"] not in matched and "default" not in field:
            out.append(f"{prefix}{field['name']}: field without a default removed")


def _first_branch(node: Any) -> str:
    return _base(node[0]) if isinstance(node, list) else _base(node)


def _check_enum(old: Any, new: Any, path: str, out: list[str]) -> None:
    old_symbols, new_symbols = list(old["symbols"]), list(new["symbols"])
    if new_symbols[: len(old_symbols)] != old_symbols:
        out.append(f"{path}: enum symbols {old_symbols} not kept as a prefix of {new_symbols}")
    if "default" in old and "default" not in new:
        out.append(f"{path}: enum default {old['default']} dropped")
