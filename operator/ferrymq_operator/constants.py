"""Names every part of the operator agrees on: API group, annotations, labels, ports."""

from __future__ import annotations

GROUP = "ferrymq.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURALS = {"Broker": "brokers", "Topic": "topics", "ConsumerGroup": "consumergroups", "User": "users"}

FIELD_MANAGER = "ferrymq-operator"
FINALIZER = "ferrymq.io/finalizer"

# Annotations a person sets on our resources.
ANN_MANAGED = "ferrymq.io/managed"                    # "false": stop managing, delete nothing
ANN_PAUSE = "ferrymq.io/pause-reconciliation"         # "true": reconcile nothing until removed
ANN_RESTART = "ferrymq.io/restart"                    # any new value: rolling restart of broker pods
ANN_ENABLE_CONSUME = "ferrymq.io/enable-consume"      # one-shot: re-enable a group disabled by protection
# Annotations the operator writes.
ANN_DRAIN_STARTED = "ferrymq.io/drain-started"        # on a broker pod: write revoked at (epoch s) before its restart
ANN_CONFIG_HASH = "ferrymq.io/config-hash"            # on broker pod templates; stale pods get restarted

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"

NAMESRV_PORT = 9876
BROKER_PORT = 10911
HA_PORT = 10912  # replication (RocketMQ's haListenPort: listenPort + 1)
GRPC_PORT = 8081  # RocketMQ 5 clients (spec.grpc.port; the Apache proxy's default)
CONTROLLER_PORT = 9878  # the failover controller (ferrymq controller)
DEFAULT_HTTP_PORT = 8080
ADDRESS_SERVICE_PORT = 8080  # RocketMQ's: rocketmq.namesrv.domain without a port means :8080
BROKER_NAMESRV_FETCH_MS = 10_000  # how often brokers re-read the name servers from the address service
DEFAULT_BROKER_IMAGE = "ferrymq/broker:0.1.0"
RUN_AS_USER = 10001
