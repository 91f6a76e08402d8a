#!/usr/bin/env bash
# Entry point of the Spark-carrying images (iceberg-writer, maintainer).
#
#   (no arguments)  run the service: python -m "$ICEFJORD_SERVICE_MODULE"
#   executor        run a Spark executor: Spark on Kubernetes (`k8s://` master) starts its
#                   executor pods from this same image with this one argument and describes
#                   the executor in SPARK_* variables (driver URL, id, cores, memory, ...)
#   anything else   run it as a command (a shell, `python -m icefjord ...`)
set -euo pipefail

run_executor() {
  local -a java_opts=()
  local line
  # SPARK_JAVA_OPT_<n> carry the driver-chosen JVM options in order (module opens, ports).
  while IFS= read -r line; do
    java_opts+=("${line#*=}")
  done < <(env | grep -E '^SPARK_JAVA_OPT_[0-9]+=' | sort -t_ -k4 -n || true)
  exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
    -Xms"${SPARK_EXECUTOR_MEMORY:?}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
    -cp "${SPARK_CLASSPATH:+${SPARK_CLASSPATH}:}${SPARK_HOME:?}/jars/*" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "${SPARK_DRIVER_URL:?}" \
    --executor-id "${SPARK_EXECUTOR_ID:?}" \
    --cores "${SPARK_EXECUTOR_CORES:?}" \
    --app-id "${SPARK_APPLICATION_ID:?}" \
    --hostname "${SPARK_EXECUTOR_POD_IP:?}" \
    --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
    --podName "${SPARK_EXECUTOR_POD_NAME:?}"
}

case "${1:-}" in
  "") exec python -m "${ICEFJORD_SERVICE_MODULE:?}" ;;
  executor) shift; run_executor ;;
  *) exec "$@" ;;
esac
