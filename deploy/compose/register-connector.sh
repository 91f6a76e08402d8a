#!/usr/bin/env bash
# Create or update a Kafka Connect connector from a JSON config file, then wait until the
# connector and all its tasks are RUNNING. PUT /connectors/<name>/config is idempotent, so
# running this again (every `docker compose up`) applies changes and is otherwise a no-op.
#
# Environment: CONNECT_URL, CONNECTOR_NAME, CONNECTOR_CONFIG (path to the JSON config),
# WAIT_SECONDS (default 180), POLL_SECONDS (default 3).
# Exit status 0 when RUNNING, 1 when FAILED or on timeout.
set -euo pipefail

: "${CONNECT_URL:?}" "${CONNECTOR_NAME:?}" "${CONNECTOR_CONFIG:?}"
deadline=$((SECONDS + ${WAIT_SECONDS:-180}))

until curl -fsS -o /dev/null -X PUT -H "Content-Type: application/json" \
        --data "@${CONNECTOR_CONFIG}" "${CONNECT_URL}/connectors/${CONNECTOR_NAME}/config"; do
  if ((SECONDS >= deadline)); then
    echo "connector ${CONNECTOR_NAME}: Kafka Connect did not accept the config in time" >&2
    exit 1
  fi
  sleep "${POLL_SECONDS:-3}"
done
echo "connector ${CONNECTOR_NAME}: config applied"

while ((SECONDS < deadline)); do
  status=$(curl -fsS "${CONNECT_URL}/connectors/${CONNECTOR_NAME}/status" || true)
  # Every "state" in the status document: the connector's, then one per task.
  states=$(grep -oE '"state" *: *"[A-Z_]+"' <<<"${status}" | cut -d'"' -f4 | sort -u | tr '\n' ' ' || true)
  case "${states}" in
    *FAILED*)
      echo "connector ${CONNECTOR_NAME}: FAILED: ${status}" >&2
      exit 1
      ;;
    "RUNNING ")
      # A connector without tasks yet reports only its own state; wait for a task.
      if grep -qE '"tasks" *: *\[ *\{' <<<"${status}"; then
        echo "connector ${CONNECTOR_NAME}: RUNNING"
        exit 0
      fi
      ;;
  esac
  sleep "${POLL_SECONDS:-3}"
done
echo "connector ${CONNECTOR_NAME}: not RUNNING after ${WAIT_SECONDS:-180} s: ${status:-no status}" >&2
exit 1
