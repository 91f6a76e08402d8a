"""schema-watcher: turns new registry schema versions into Iceberg evolution plans.

The pure core lives here: `plan_evolution` decides, `apply_plan` shows what a plan means.
"""

from services.schema_watcher.apply import apply_plan, normalize_row_schema, schemas_equivalent
from services.schema_watcher.evolution import plan_evolution
from services.schema_watcher.plan import EvolutionPlan
from shared.avro_types import MalformedSchemaError
from shared.events import SchemaOperation, SchemaOperationKind, Verdict

__all__ = [
    "EvolutionPlan",
    "MalformedSchemaError",
    "SchemaOperation",
    "SchemaOperationKind",
    "Verdict",
    "apply_plan",
    "normalize_row_schema",
    "plan_evolution",
    "schemas_equivalent",
]
