"""``python -m deploycheck``: run the deployment checks and print every problem.

Exit status 0 when all checks pass, 1 when any problem is found, 2 on bad arguments.
Problems print as ``<file>: <message>``; checks skipped for a missing tool print as
``SKIPPED ...`` (in CI, with ``CI`` set, a missing tool is a problem instead).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from deploycheck import compose, grafana, images, kubernetes, prometheus
from deploycheck.contract import Contract, load_contract
from deploycheck.findings import Context, Problem, ci_requires_tools

Check = Callable[[Context, Contract], list[Problem]]
CHECKS: dict[str, Check] = {
    "compose": compose.check,
    "kubernetes": kubernetes.check,
    "prometheus": prometheus.check,
    "grafana": grafana.check,
    "images": images.check,
}
ROOT = Path(__file__).resolve().parents[3]


def run(ctx: Context, names: list[str]) -> list[Problem]:
    """Run the named checks against ``ctx``; a check that crashes is reported, not raised."""
    contract = load_contract(ctx.root)
    problems: list[Problem] = []
    for name in names:
        try:
            problems += CHECKS[name](ctx, contract)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(Problem(name, f"check crashed: {type(exc).__name__}: {exc}"))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploycheck", description=__doc__.splitlines()[0])
    parser.add_argument("checks", nargs="*", choices=[[], *CHECKS], help="default: all")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root")
    parser.add_argument(
        "--require-tools",
        action=argparse.BooleanOptionalAction,
        default=ci_requires_tools(),
        help="treat a missing tool as a problem (default: on when CI is set)",
    )
    parser.add_argument(
        "--write", action="store_true", help="regenerate derived files (the PrometheusRule)"
    )
    args = parser.parse_args(argv)
    ctx = Context(root=args.root.resolve(), require_tools=args.require_tools)
    if args.write:
        print(f"wrote {ctx.rel(prometheus.write(ctx))}")
    names = list(args.checks) or list(CHECKS)
    problems = run(ctx, names)
    for problem in problems:
        print(problem)
    for message in ctx.skipped:
        print(f"SKIPPED {message}")
    print(f"deploycheck: {len(names)} checks, {len(problems)} problems, {len(ctx.skipped)} skipped")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
