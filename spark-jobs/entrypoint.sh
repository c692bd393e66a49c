#!/bin/bash
# Entrypoint of FerryMQ's Spark image.
#   executor ...  -> Spark's Kubernetes executor backend, configured from the SPARK_* variables
#                    that the driver sets on the executor pods it creates
#   anything else -> run as given (the CronJob runs `spark-submit ...` in client mode)
set -euo pipefail

if [ "${1:-}" = "executor" ]; then
  shift
  # The driver passes JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... (in that order).
  java_opts=()
  while IFS= read -r opt; do java_opts+=("$opt"); done < <(
    env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
  classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:${SPARK_HOME}/jars/*${SPARK_EXTRA_CLASSPATH:+:$SPARK_EXTRA_CLASSPATH}"
  exec /usr/bin/tini -s -- "$JAVA_HOME/bin/java" "${java_opts[@]}" \
    "-Xms$SPARK_EXECUTOR_MEMORY" "-Xmx$SPARK_EXECUTOR_MEMORY" -cp "$classpath" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" --cores "$SPARK_EXECUTOR_CORES" \
    --app-id "$SPARK_APPLICATION_ID" --hostname "$SPARK_EXECUTOR_POD_IP" \
    --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" --podName "$SPARK_EXECUTOR_POD_NAME"
fi

exec /usr/bin/tini -s -- "$@"
