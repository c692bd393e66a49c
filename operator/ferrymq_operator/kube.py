"""The few Kubernetes API calls the operator makes, through the official ``kubernetes`` client.

The client is synchronous, so every call runs in a worker thread (``asyncio.to_thread``):
nothing blocks kopf's event loop. Owned objects are written with server-side apply (one
field manager, forced), which makes every reconcile an idempotent "make it so".
"""

from __future__ import annotations

import asyncio
import json
from typing import Callable

import kubernetes
from kubernetes.client.rest import ApiException

from ferrymq_operator.constants import FIELD_MANAGER, GROUP, PLURALS, VERSION

# apiVersion/kind -> (path prefix, plural) for the kinds we apply.
_RESOURCES = {
    ("v1", "ConfigMap"): ("/api/v1", "configmaps"),
    ("v1", "Secret"): ("/api/v1", "secrets"),
    ("cert-manager.io/v1", "Certificate"): ("/apis/cert-manager.io/v1", "certificates"),
    ("v1", "Service"): ("/api/v1", "services"),
    ("v1", "Pod"): ("/api/v1", "pods"),
    ("v1", "PersistentVolumeClaim"): ("/api/v1", "persistentvolumeclaims"),
    ("apps/v1", "StatefulSet"): ("/apis/apps/v1", "statefulsets"),
    ("policy/v1", "PodDisruptionBudget"): ("/apis/policy/v1", "poddisruptionbudgets"),
    ("batch/v1", "CronJob"): ("/apis/batch/v1", "cronjobs"),
    ("batch/v1", "Job"): ("/apis/batch/v1", "jobs"),
    ("v1", "ServiceAccount"): ("/api/v1", "serviceaccounts"),
    ("rbac.authorization.k8s.io/v1", "Role"): ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
}
# Cluster-scoped kinds we read.
_CLUSTER_RESOURCES = {
    ("storage.k8s.io/v1", "StorageClass"): ("/apis/storage.k8s.io/v1", "storageclasses"),
}
_RESOURCES.update({(f"{GROUP}/{VERSION}", kind): (f"/apis/{GROUP}/{VERSION}", plural) for kind, plural in PLURALS.items()})


_client: kubernetes.client.ApiClient | None = None  # one per process, made after load_config
# Called before every write (leadership.Leadership.check: a replica that lost the Lease exits).
write_guard: Callable[[], None] | None = None


def load_config() -> None:
    """In a pod: the ServiceAccount; elsewhere: $KUBECONFIG / ~/.kube/config."""
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    close()  # a client made before reads the old configuration


def close() -> None:
    """Release the API client's connection pool (kopf cleanup)."""
    global _client
    if _client is not None:
        _client.close()
        _client = None


def _api() -> kubernetes.client.ApiClient:
    global _client
    if _client is None:
        _client = kubernetes.client.ApiClient()  # thread-safe: its urllib3 pool serves every worker thread
    return _client


def _path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    prefix, plural = _RESOURCES[(api_version, kind)]
    return f"{prefix}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


def _call(method: str, path: str, body=None, query: list | None = None, content_type: str | None = None):
    """One raw API request (the generated typed clients have no server-side apply), JSON in
    and out; non-2xx answers raise ApiException with the server's message."""
    if method != "GET" and write_guard is not None:
        write_guard()
    api = _api()
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    params = api.param_serialize(method, path, query_params=query or [], header_params=headers, body=body,
                                 auth_settings=["BearerToken"])
    response = api.call_api(*params)
    raw = response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(status=response.status, reason=response.reason, body=raw.decode(errors="replace"))
    return json.loads(raw) if raw else None


async def apply(obj: dict) -> dict:
    meta = obj["metadata"]
    path = _path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
    return await asyncio.to_thread(_call, "PATCH", path, obj, [("fieldManager", FIELD_MANAGER), ("force", "true")],
                                   "application/apply-patch+yaml")


async def get(api_version: str, kind: str, namespace: str, name: str) -> dict | None:
    try:
        return await asyncio.to_thread(_call, "GET", _path(api_version, kind, namespace, name))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


async def create(obj: dict) -> dict | None:
    """Create ``obj`` unless it exists (then None, and the existing one is left as it is)."""
    meta = obj["metadata"]
    try:
        return await asyncio.to_thread(_call, "POST", _path(obj["apiVersion"], obj["kind"], meta["namespace"]), obj,
                                       None, "application/json")
    except ApiException as e:
        if e.status == 409:
            return None
        raise


async def get_cluster(api_version: str, kind: str, name: str) -> dict | None:
    """A cluster-scoped object (a StorageClass), or None."""
    prefix, plural = _CLUSTER_RESOURCES[(api_version, kind)]
    try:
        return await asyncio.to_thread(_call, "GET", f"{prefix}/{plural}/{name}")
    except ApiException as e:
        if e.status == 404:
            return None
        raise


async def list_(api_version: str, kind: str, namespace: str, label_selector: str | None = None) -> list[dict]:
    query = [("labelSelector", label_selector)] if label_selector else []
    result = await asyncio.to_thread(_call, "GET", _path(api_version, kind, namespace), None, query)
    return result.get("items", [])


async def delete(api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None,
                 propagation: str | None = None) -> bool:
    """``uid``: delete only that object (not a namesake created since it was read; a
    mismatch is a 409). ``propagation``: Background/Foreground/Orphan for its dependents."""
    options: dict = {}
    if uid:
        options["preconditions"] = {"uid": uid}
    if propagation:
        options["propagationPolicy"] = propagation
    try:
        await asyncio.to_thread(_call, "DELETE", _path(api_version, kind, namespace, name), options or None, None,
                                "application/json" if options else None)
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


async def patch_merge(api_version: str, kind: str, namespace: str, name: str, patch: dict) -> dict:
    return await asyncio.to_thread(_call, "PATCH", _path(api_version, kind, namespace, name), patch, None,
                                   "application/merge-patch+json")
