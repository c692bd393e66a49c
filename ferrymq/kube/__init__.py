"""A minimal asyncio client of the Kubernetes API (on aiohttp, no ``kubernetes`` package) and
Lease-based leader election on top of it: what FerryMQ's controller needs to keep its state in
a ConfigMap by compare-and-swap and to run in several replicas of which one leads.

- ``config``: where the API server is and how to authenticate (in-cluster or a kubeconfig);
- ``client``: get, create and compare-and-swap replace of namespaced objects (Leases,
  ConfigMaps), with a timeout on every request and errors that carry the API's status;
- ``election``: ``LeaseElector``, client-go's leader election on a coordination.k8s.io Lease.
"""

from ferrymq.kube.client import (
    CONFIG_MAPS,
    LEASES,
    Conflict,
    KubeApiError,
    KubeClient,
    KubeConnectionError,
    KubeError,
    NotFound,
    Resource,
)
from ferrymq.kube.config import KubeConfig, KubeConfigError
from ferrymq.kube.election import LeaseElector

__all__ = ["CONFIG_MAPS", "LEASES", "Conflict", "KubeApiError", "KubeClient", "KubeConfig", "KubeConfigError",
           "KubeConnectionError", "KubeError", "LeaseElector", "NotFound", "Resource"]
