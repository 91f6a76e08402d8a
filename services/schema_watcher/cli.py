"""`icefjord schema`: inspect evolution plans offline.

`icefjord schema diff OLD.avsc NEW.avsc` prints the plan as JSON on stdout and exits with
0 when the verdict is APPLY, 3 when it is QUARANTINE, and 2 when a file cannot be read or is
not JSON (message on stderr).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from services.schema_watcher.evolution import plan_evolution
from shared.events import Verdict

EXIT_APPLY = 0
EXIT_UNREADABLE = 2
EXIT_QUARANTINE = 3

schema_app = typer.Typer(
    help="Inspect Iceberg schema evolution plans for Avro schemas.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@schema_app.callback()
def _schema() -> None:
    """Inspect Iceberg schema evolution plans for Avro schemas."""


class _UnreadableSchemaFile(Exception):
    """A schema file is missing, unreadable or not JSON."""


def _load(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _UnreadableSchemaFile(f"cannot read {path}: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _UnreadableSchemaFile(f"{path} is not JSON: {exc}") from exc


@schema_app.command("diff")
def diff(
    old: Annotated[Path, typer.Argument(help="The old schema version (.avsc, Avro JSON).")],
    new: Annotated[Path, typer.Argument(help="The new schema version (.avsc, Avro JSON).")],
) -> None:
    """Print the evolution plan from OLD to NEW as JSON.

    Exit codes: 0 the plan is APPLY; 3 the plan is QUARANTINE; 2 a file cannot be read or is
    not JSON.
    """
    try:
        old_schema = _load(old)
        new_schema = _load(new)
    except _UnreadableSchemaFile as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_UNREADABLE) from None
    plan = plan_evolution(old_schema, new_schema)
    typer.echo(json.dumps(plan.to_json(), indent=2))
    raise typer.Exit(EXIT_APPLY if plan.verdict is Verdict.APPLY else EXIT_QUARANTINE)
