# The FerryMQ operator image: kopf + the ferrymq client, non-root, read-only root filesystem.
#   docker build -t ferrymq/operator:0.1.0 .
# Base pinned to an exact Python release; bump deliberately (and rebuild the broker image).
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY ferrymq ferrymq
# ferrymq_spark is installed with the package: the operator builds ConsumerGroups' Spark
# CronJobs with ferrymq_spark.k8s_cronjob (standard library only; pyspark is not installed).
COPY spark-jobs/ferrymq_spark spark-jobs/ferrymq_spark
RUN pip install --no-cache-dir --no-compile --prefix=/install '.[operator]'

FROM ${PYTHON_IMAGE}
COPY --from=build /install /usr/local
COPY operator/ferrymq_operator /app/ferrymq_operator
ENV PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["python", "-m", "ferrymq_operator"]
