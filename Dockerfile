# The FerryMQ operator image: kopf + the ferrymq client, non-root, read-only root filesystem.
#   docker build -t ferrymq/operator:0.1.0 .
# PYTHON_IMAGE: any Debian bookworm image with Python 3.11 (the official slim image by default;
# `make images` passes a locally built one where no registry is reachable). Versions come from
# images-constraints.txt. A TLS-inspecting proxy's CA: put the trust store in the build context as
# build-ca.crt (`make images` does, from FERRYMQ_BUILD_CA); only the build stage sees it.
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md images-constraints.txt build-ca.cr[t] ./
COPY ferrymq ferrymq
# ferrymq_spark is installed with the package: the operator builds ConsumerGroups' Spark
# CronJobs with ferrymq_spark.k8s_cronjob (standard library only; pyspark is not installed).
COPY spark-jobs/ferrymq_spark spark-jobs/ferrymq_spark
RUN python3 -m venv /opt/ferrymq \
 && if [ -f build-ca.crt ]; then export PIP_CERT=/src/build-ca.crt; fi \
 && /opt/ferrymq/bin/pip install --no-cache-dir --no-compile -c images-constraints.txt '.[operator]'

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/ferrymq /opt/ferrymq
COPY operator/ferrymq_operator /app/ferrymq_operator
# A passwd entry for the non-root user: kopf names its peering identity after getpass.getuser().
RUN useradd --uid 10001 --gid 0 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin ferrymq
ENV PATH=/opt/ferrymq/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["python", "-m", "ferrymq_operator"]
