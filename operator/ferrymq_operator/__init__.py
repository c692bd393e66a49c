"""The FerryMQ Kubernetes operator (kopf).

Handlers (``handlers.py``) are thin: they read a custom resource, call the pure functions in
``manifests``, ``rollout``, ``topics``, ``groups``, ``spark_jobs`` and ``conditions`` that decide
what should exist, apply it through ``kube`` and reach brokers only through
``ferrymq.client.admin`` (wrapped in ``broker_admin``). ``spark_jobs`` gets a ConsumerGroup's
Spark CronJob from ``ferrymq_spark.k8s_cronjob`` (standard library only; the one piece of
ferrymq_spark the operator uses).

This package lives in ``operator/ferrymq_operator`` and never in ``operator/`` itself: an
``operator/__init__.py`` would shadow Python's standard-library ``operator`` module.
"""

__version__ = "0.1.0"
