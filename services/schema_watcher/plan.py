"""The evolution plan: what schema-watcher decides for one new schema version.

A plan is built from the control events' own types (`shared.events`: `Verdict`,
`SchemaOperation`, `SchemaOperationKind`), so the watcher publishes its operations as they
are in the `SchemaChange` event of `contracts/avro/control_event.v4.avsc`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.events import SchemaOperation, Verdict


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
            "operations": [op.to_record() for op in self.operations],
            "reasons": list(self.reasons),
        }
