"""The evolution plan: what schema-watcher decides for one new schema version.

These are the service's own value types. The lead maps them onto the `SchemaChange` control
event (common brief, wire fact 2); the kind and verdict values are spelled exactly as on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    """APPLY: every operation is safe for Iceberg. QUARANTINE: a human must look first."""

    APPLY = "APPLY"
    QUARANTINE = "QUARANTINE"


class OperationKind(StrEnum):
    """One Iceberg schema update; values equal the `SchemaOperationKind` wire enum."""

    ADD_COLUMN = "ADD_COLUMN"
    WIDEN_TYPE = "WIDEN_TYPE"
    MAKE_OPTIONAL = "MAKE_OPTIONAL"
    RENAME_COLUMN = "RENAME_COLUMN"
    SOFT_DROP_COLUMN = "SOFT_DROP_COLUMN"


@dataclass(frozen=True, slots=True)
class SchemaOperation:
    """One step of a plan.

    `path` names the column in the OLD row schema, parents first. For ADD_COLUMN it is the old
    path of the parent plus the new field's name. A list element is reached through the
    component "element" and a map value through "value" (Iceberg's own names), e.g.
    `("lines", "element", "sku")`.

    `type_json` is `json.dumps(avro_type, sort_keys=True)` of the NEW-side type, with named
    types inlined so it stands alone: for ADD_COLUMN the field's whole type as declared (a
    nullable column stays `["null", T]`), for WIDEN_TYPE the non-null type only (optionality is
    carried by MAKE_OPTIONAL). `new_name` is set for RENAME_COLUMN only. `doc` is the new
    field's doc, when it has one.
    """

    kind: OperationKind
    path: tuple[str, ...]
    type_json: str | None = None
    new_name: str | None = None
    doc: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with the wire field names."""
        return {
            "kind": self.kind.value,
            "path": list(self.path),
            "type_json": self.type_json,
            "new_name": self.new_name,
            "doc": self.doc,
        }


@dataclass(frozen=True, slots=True)
class EvolutionPlan:
    """The verdict, the operations in apply order, and the reasons for a quarantine.

    Operations are ordered deterministically: a depth-first walk of the new schema in its field
    order, each field's own operations (rename, make-optional, widen, add) before those of its
    children; soft-drops come last, in old-schema order, parents before children.

    A QUARANTINE plan still lists the safe operations that were found, for the operator's
    information; they must not be applied. An APPLY plan has no reasons.
    """

    verdict: Verdict
    operations: tuple[SchemaOperation, ...] = ()
    reasons: tuple[str, ...] = field(default=())

    @property
    def reason(self) -> str | None:
        """The reasons joined by "; ", or None: the shape of the wire's `reason` field."""
        return "; ".join(self.reasons) if self.reasons else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: verdict, operations (wire field names) and reasons."""
        return {
            "verdict": self.verdict.value,
            "operations": [op.to_json() for op in self.operations],
            "reasons": list(self.reasons),
        }
