#!/usr/bin/env bash
# Validate the deployment artefacts offline: compose file, Kubernetes overlays, Prometheus
# rules, Grafana dashboards, Dockerfiles. Usage (from anywhere):
#   deploy/validate/run.sh                  # every check
#   deploy/validate/run.sh kubernetes       # some: compose kubernetes prometheus grafana images
#   deploy/validate/run.sh --write          # regenerate the PrometheusRule, then check
# Needs the project's .venv (PyPI: kubernetes-validate, jsonschema, pyyaml) and the tools
# kubectl, promtool and shellcheck; with CI set, a missing tool fails instead of skipping.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
python="${PYTHON:-${root}/.venv/bin/python}"
PYTHONPATH="${here}${PYTHONPATH:+:${PYTHONPATH}}" exec "${python}" -m deploycheck "$@"
