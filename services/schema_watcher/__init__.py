"""schema-watcher: turns new registry schema versions into Iceberg evolution plans.

The pure core lives here: `plan_evolution` decides, `apply_plan` shows what a plan means.
"""

from services.schema_watcher.apply import apply_plan, normalize_row_schema, schemas_equivalent
from services.schema_watcher.evolution import plan_evolution
from services.schema_watcher.plan import EvolutionPlan, OperationKind, SchemaOperation, Verdict
from shared.avro_types import MalformedSchemaError

__all__ = [
    "EvolutionPlan",
    "MalformedSchemaError",
    "OperationKind",
    "SchemaOperation",
    "Verdict",
    "apply_plan",
    "normalize_row_schema",
    "plan_evolution",
    "schemas_equivalent",
]
