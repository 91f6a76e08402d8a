"""Properties: random safe evolutions are applied and reproduced; unsafe ones never applied.

A row schema is generated at random (primitives, logical types, decimals, nested records,
arrays and maps, nullable or not). The new version is made from it by a random sequence of
mutations, written here independently of the code under test.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.schema_watcher import (
    EvolutionPlan,
    Verdict,
    apply_plan,
    normalize_row_schema,
    plan_evolution,
    schemas_equivalent,
)

pytestmark = pytest.mark.unit

PROTECT = "x-protect"  # marks key columns and the victim of an unsafe mutation


def clone(value: Any) -> Any:
    """A deep copy that also breaks shared references between equal sub-schemas."""
    return json.loads(json.dumps(value))


def decimal(precision: int, scale: int) -> dict[str, Any]:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


PLAIN_LEAVES: list[Any] = [
    "boolean",
    "int",
    "long",
    "float",
    "double",
    "string",
    "bytes",
    {"type": "int", "logicalType": "date"},
    {"type": "long", "logicalType": "time-micros"},
    {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "long", "logicalType": "local-timestamp-micros"},
    {"type": "string", "logicalType": "uuid"},
]
DECIMALS = st.integers(2, 30).flatmap(lambda p: st.integers(0, p - 1).map(lambda s: decimal(p, s)))
LEAVES = st.one_of(st.sampled_from(PLAIN_LEAVES), DECIMALS)
NAMES = st.sampled_from(list("abcdefgh"))


def leaf_family(leaf: Any) -> str:
    """Family of a generated leaf, as Iceberg sees it (independent of the code under test)."""
    if isinstance(leaf, str):
        return leaf
    return str(leaf["logicalType"])


def maybe_nullable(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.tuples(inner, st.booleans()).map(lambda t: ["null", t[0]] if t[1] else t[0])


def make_field(name: str, avro_type: Any) -> dict[str, Any]:
    field: dict[str, Any] = {"name": name, "type": avro_type}
    if isinstance(avro_type, list):
        field["default"] = None
    return field


def records(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.lists(
        st.tuples(NAMES, maybe_nullable(children)),
        min_size=1,
        max_size=4,
        unique_by=lambda t: t[0],
    ).map(lambda fs: {"type": "record", "name": "_", "fields": [make_field(*f) for f in fs]})


TYPES = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        records(children),
        maybe_nullable(children).map(lambda t: {"type": "array", "items": t}),
        maybe_nullable(children).map(lambda t: {"type": "map", "values": t}),
    ),
    max_leaves=8,
)


def base_of(avro_type: Any) -> Any:
    return avro_type[1] if isinstance(avro_type, list) else avro_type


def all_records(avro_type: Any) -> Iterator[dict[str, Any]]:
    base = base_of(avro_type)
    if not isinstance(base, dict):
        return
    if base["type"] == "record":
        yield base
        for field in base["fields"]:
            yield from all_records(field["type"])
    elif base["type"] == "array":
        yield from all_records(base["items"])
    elif base["type"] == "map":
        yield from all_records(base["values"])


def all_fields(root: dict[str, Any]) -> list[dict[str, Any]]:
    return [field for rec in list(all_records(root)) for field in rec["fields"]]


def name_records(root: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Give every record a unique type name (generated ones are all "_")."""
    for number, rec in enumerate(all_records(root)):
        rec["name"] = f"{prefix}{number}"
    root["name"] = "Row"
    return root


ROWS = records(TYPES).map(lambda r: name_records(clone(r), "Rec"))


def set_base(holder: dict[str, Any], key: str, new_base: Any) -> None:
    current = holder[key]
    holder[key] = ["null", new_base] if isinstance(current, list) else new_base


# --- safe mutations: (draw, new row, fresh names) -> None; they never touch protected fields --

Draw = Callable[[st.SearchStrategy[Any]], Any]

NEW_FIELDS = st.one_of(
    TYPES.map(lambda t: {"type": ["null", t], "default": None}),
    st.just({"type": "int", "default": 0}),
    st.just({"type": "string", "default": ""}),
)


def add_field(draw: Draw, rec_root: dict[str, Any], fresh: Iterator[str]) -> None:
    target = draw(st.sampled_from(list(all_records(rec_root))))
    field = {"name": next(fresh), **clone(draw(NEW_FIELDS))}
    target["fields"].insert(draw(st.integers(0, len(target["fields"]))), field)


def _widenable(base: Any) -> bool:
    if base in ("int", "float"):
        return True
    return (
        isinstance(base, dict) and base.get("logicalType") == "decimal" and base["precision"] < 38
    )


def _widened(draw: Draw, base: Any) -> Any:
    if base in ("int", "float"):
        return {"int": "long", "float": "double"}[base]
    return {**base, "precision": draw(st.integers(base["precision"] + 1, 38))}


def widen(draw: Draw, root: dict[str, Any], fresh: Iterator[str]) -> None:
    slots: list[tuple[dict[str, Any], str]] = []
    for field in all_fields(root):
        if field.get(PROTECT):
            continue
        slots.append((field, "type"))
        base = base_of(field["type"])
        if isinstance(base, dict) and base["type"] in ("array", "map"):
            slots.append((base, "items" if base["type"] == "array" else "values"))
    slots = [(holder, key) for holder, key in slots if _widenable(base_of(holder[key]))]
    if slots:
        holder, key = draw(st.sampled_from(slots))
        set_base(holder, key, _widened(draw, base_of(holder[key])))


def make_optional(draw: Draw, root: dict[str, Any], fresh: Iterator[str]) -> None:
    fields = [f for f in all_fields(root) if not f.get(PROTECT) and not isinstance(f["type"], list)]
    if fields:
        field = draw(st.sampled_from(fields))
        field["type"] = ["null", field["type"]]
        field["default"] = None


def rename(draw: Draw, root: dict[str, Any], fresh: Iterator[str]) -> None:
    fields = [f for f in all_fields(root) if not f.get(PROTECT)]
    if fields:
        field = draw(st.sampled_from(fields))
        field["aliases"] = [*field.get("aliases", []), field["name"]]
        field["name"] = next(fresh)


def drop(draw: Draw, root: dict[str, Any], fresh: Iterator[str]) -> None:
    candidates = [
        (rec, field)
        for rec in list(all_records(root))
        for field in rec["fields"]
        if PROTECT not in json.dumps(field)
    ]
    if candidates:
        rec, field = draw(st.sampled_from(candidates))
        rec["fields"].remove(field)


def change_doc(draw: Draw, root: dict[str, Any], fresh: Iterator[str]) -> None:
    fields = all_fields(root)
    if fields:
        draw(st.sampled_from(fields))["doc"] = draw(st.text(max_size=10))


def reorder(draw: Draw, root: dict[str, Any], fresh: Iterator[str]) -> None:
    rec = draw(st.sampled_from(list(all_records(root))))
    rec["fields"] = draw(st.permutations(rec["fields"]))


def change_default(draw: Draw, root: dict[str, Any], fresh: Iterator[str]) -> None:
    fields = [f for f in all_fields(root) if f["type"] in ("int", "long") and not f.get(PROTECT)]
    if fields:
        draw(st.sampled_from(fields))["default"] = draw(st.integers(-5, 5))


SAFE_MUTATIONS = [
    add_field,
    widen,
    make_optional,
    rename,
    drop,
    change_doc,
    reorder,
    change_default,
]
SAFE_STEPS = st.lists(st.sampled_from(SAFE_MUTATIONS), max_size=6)


def envelope(row: dict[str, Any]) -> dict[str, Any]:
    """Wrap a row (whose first field is the key column `id`) in a change-record schema."""
    return {
        "type": "record",
        "name": "RowChange",
        "namespace": "io.icefjord.changes.shop",
        "icefjord.table": "shop.row",
        "icefjord.key": ["id"],
        "fields": [
            {"name": "position", "type": "string"},
            {"name": "key", "type": {"type": "record", "name": "RowKey", "fields": [ID]}},
            {"name": "after", "type": ["null", row], "default": None},
        ],
    }


ID = {"name": "id", "type": "long"}


def versions(row: dict[str, Any], as_change_record: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(old row, new row to mutate); with the key column when it becomes a change record."""
    old = clone(row)
    if as_change_record:
        old["fields"].insert(0, {**ID, PROTECT: True})
    return old, clone(old)


def finish(
    old: dict[str, Any], new: dict[str, Any], as_change_record: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    name_records(new, "New")
    if as_change_record:
        old, new = envelope(old), envelope(new)
    fastavro.parse_schema(clone(new))  # the generator itself must produce valid Avro
    return old, new


def fields_everywhere(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return all_fields(schema)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), row=ROWS, steps=SAFE_STEPS, as_change_record=st.booleans())
def test_safe_evolution_is_applied_and_reproduces_the_new_schema(
    data: st.DataObject, row: dict[str, Any], steps: list[Any], as_change_record: bool
) -> None:
    old, new = versions(row, as_change_record)
    fresh = (f"n{i}" for i in itertools.count())
    for step in steps:
        step(data.draw, new, fresh)
    old, new = finish(old, new, as_change_record)

    plan = plan_evolution(old, new)

    assert plan.verdict is Verdict.APPLY, plan.reasons
    applied = apply_plan(old, plan)
    assert schemas_equivalent(applied, new)
    for field in fields_everywhere(applied):
        if field.get("icefjord.deprecated"):
            assert isinstance(field["type"], list) and "null" in field["type"]
    fastavro.parse_schema(clone(applied))  # generated rows use each named type once
    no_change = normalize_row_schema(old) == normalize_row_schema(new)
    assert (plan.operations == ()) == no_change


@settings(max_examples=100, deadline=None)
@given(row=ROWS)
def test_a_schema_against_itself_is_applied_without_operations(row: dict[str, Any]) -> None:
    assert plan_evolution(row, clone(row)) == EvolutionPlan(Verdict.APPLY)


# --- unsafe mutations: a protected "victim" field changes in a way Iceberg cannot follow ------


@st.composite
def unsafe_changes(draw: Draw) -> tuple[str, Any, Any]:
    """(rule, old victim type, new victim type); None as old type: a new required field."""
    rule = draw(st.sampled_from(["narrow", "decimal narrow", "scale", "family", "required", "add"]))
    if rule == "narrow":
        old, new = draw(st.sampled_from([("long", "int"), ("double", "float")]))
    elif rule == "decimal narrow":
        precision = draw(st.integers(2, 38))
        scale = draw(st.integers(0, precision - 1))
        old = decimal(precision, scale)
        new = decimal(draw(st.integers(max(scale, 1), precision - 1)), scale)
    elif rule == "scale":
        precision = draw(st.integers(1, 38))
        scale = draw(st.integers(0, precision))
        new_precision = draw(st.integers(1, 38))
        new_scale = draw(st.integers(0, new_precision).filter(lambda s: s != scale))
        old, new = decimal(precision, scale), decimal(new_precision, new_scale)
    elif rule == "family":
        old = draw(LEAVES)
        new = draw(
            LEAVES.filter(
                lambda leaf: (
                    leaf_family(leaf) != leaf_family(old)
                    and (leaf_family(old), leaf_family(leaf))
                    not in {("int", "long"), ("float", "double")}
                )
            )
        )
    elif rule == "required":
        leaf = draw(LEAVES)
        old, new = ["null", leaf], leaf
    else:
        old, new = None, draw(LEAVES)
    if rule in ("narrow", "decimal narrow", "scale", "family") and draw(st.booleans()):
        old, new = ["null", old], ["null", new]
    return rule, old, new


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    row=ROWS,
    change=unsafe_changes(),
    steps=SAFE_STEPS,
    as_change_record=st.booleans(),
)
def test_unsafe_evolution_is_never_applied(
    data: st.DataObject,
    row: dict[str, Any],
    change: tuple[str, Any, Any],
    steps: list[Any],
    as_change_record: bool,
) -> None:
    _, old_type, new_type = change
    old, new = versions(row, as_change_record)
    where = data.draw(st.integers(0, len(list(all_records(old))) - 1))
    if old_type is not None:
        list(all_records(old))[where]["fields"].append(
            {**make_field("victim", clone(old_type)), PROTECT: True}
        )
        new = clone(old)
    victim = {"name": "victim", "type": clone(new_type), PROTECT: True}
    if isinstance(new_type, list):
        victim["default"] = None
    target = list(all_records(new))[where]
    target["fields"] = [f for f in target["fields"] if f["name"] != "victim"] + [victim]
    fresh = (f"n{i}" for i in itertools.count())
    for step in steps:
        step(data.draw, new, fresh)
    old, new = finish(old, new, as_change_record)

    plan = plan_evolution(old, new)

    assert plan.verdict is Verdict.QUARANTINE
    assert any("victim" in reason for reason in plan.reasons), plan.reasons
    assert not any("internal error" in reason for reason in plan.reasons)


# --- robustness: corrupted schemas give a verdict, never an exception or an internal error ----

JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["type", "name", "fields", "items"]), children, max_size=3
        )
    ),
    max_leaves=10,
)


def corrupt(draw: Draw, schema: dict[str, Any]) -> None:
    """Replace one random type or name somewhere in the schema by junk."""
    fields = all_fields(schema)
    field = draw(st.sampled_from(fields))
    key = draw(st.sampled_from(["type", "name", "aliases"]))
    field[key] = draw(JUNK)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), row=ROWS, corrupt_old=st.booleans())
def test_corrupted_schema_gives_a_verdict_not_an_exception(
    data: st.DataObject, row: dict[str, Any], corrupt_old: bool
) -> None:
    old, new = clone(row), clone(row)
    corrupt(data.draw, old if corrupt_old else new)

    plan = plan_evolution(old, new)

    assert plan.verdict in (Verdict.APPLY, Verdict.QUARANTINE)
    assert not any("internal error" in reason for reason in plan.reasons), plan.reasons


@settings(max_examples=200, deadline=None)
@given(old=JUNK, new=JUNK)
def test_arbitrary_json_is_quarantined(old: Any, new: Any) -> None:
    plan = plan_evolution(old, new)

    assert plan.verdict is Verdict.QUARANTINE
    assert not any("internal error" in reason for reason in plan.reasons), plan.reasons
