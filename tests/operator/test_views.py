"""The read-views of observed Kubernetes objects (views.py): named properties over the dicts
the API server hands over, every one missing-safe."""

from __future__ import annotations

import base64

import pytest

from ferrymq_operator.constants import ANN_CONFIG_HASH, ANN_DRAIN_STARTED, ANN_MANAGED, ANN_PAUSE, LABEL_COMPONENT
from ferrymq_operator.views import (
    ClaimTemplate,
    ClaimView,
    CronJobView,
    ObjectView,
    PodView,
    ResourceView,
    SecretView,
    StatefulSetView,
    StorageClassView,
    dig,
    epoch_seconds,
    size_bytes,
)

VIEWS = (ObjectView, ResourceView, PodView, StatefulSetView, ClaimView, StorageClassView, SecretView, CronJobView)


def test_metadata():
    v = ObjectView({"kind": "Pod", "metadata": {
        "name": "p", "namespace": "prod", "uid": "u", "generation": 4, "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {LABEL_COMPONENT: "broker"}, "annotations": {"a": "b"}, "deletionTimestamp": "now",
        "ownerReferences": [{"uid": "owner"}]}})
    assert (v.kind, v.name, v.namespace, v.uid, v.generation) == ("Pod", "p", "prod", "u", 4)
    assert v.creation_timestamp == "2026-01-01T00:00:00Z" and v.deleting and v.component == "broker"
    assert v.annotations == {"a": "b"} and v.owned_by("owner") and not v.owned_by("other")


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_reads_an_empty_or_missing_object_as_unset(view):
    for v in (view({}), view.of(None), view({"metadata": None, "spec": None, "status": None})):
        assert (v.name, v.namespace, v.uid, v.deleting, dict(v.labels), dict(v.annotations)) == ("", "", None, False, {}, {})
        assert (dict(v.spec), dict(v.status), v.conditions, v.condition("Ready")) == ({}, {}, [], None)


def test_resource_view():
    res = ResourceView({"metadata": {"annotations": {ANN_PAUSE: "True", ANN_MANAGED: "false"}},
                        "spec": {"brokerRef": {"name": "demo"}},
                        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NoBrokers"}]}})
    assert res.broker_ref == "demo" and res.paused and res.unmanaged
    assert res.condition("Ready")["reason"] == "NoBrokers"
    assert not ResourceView({}).paused and not ResourceView({}).unmanaged and ResourceView({}).broker_ref == ""


def pod(name="demo-broker-2", ready="True", since="2026-11-28T13:00:00Z", **meta) -> dict:
    return {"metadata": {"name": name, **meta},
            "status": {"podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}],
                       "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since}]}}


def test_pod_view():
    p = PodView(pod(annotations={ANN_CONFIG_HASH: "abc", ANN_DRAIN_STARTED: "17"}, labels={LABEL_COMPONENT: "broker-s1"}))
    assert p.ready and p.ready_since == epoch_seconds("2026-11-28T13:00:00Z") and p.ordinal == 2
    assert p.ips == {"10.0.0.5", "fd00::5"} and p.config_hash == "abc" and p.drain_started == "17" and p.is_slave
    assert not PodView(pod(ready="False")).ready and PodView(pod(ready="False")).ready_since is None
    assert not PodView(pod(deletionTimestamp="now")).ready
    assert not PodView({"metadata": {"name": "x-0"}}).is_slave and PodView({}).ips == set()


def test_statefulset_view():
    sts = StatefulSetView({"spec": {"replicas": 3, "serviceName": "h", "selector": {"matchLabels": {"a": "b"}},
                                    "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                                        "accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                                        "resources": {"requests": {"storage": "1Gi"}}}}]},
                           "status": {"readyReplicas": 2}})
    assert (sts.replicas, sts.ready_replicas, sts.service_name, dict(sts.selector_labels)) == (3, 2, "h", {"a": "b"})
    assert sts.pod_management_policy == "OrderedReady"
    assert sts.claim_templates == [ClaimTemplate("data", 2**30, "fast", ("ReadWriteOnce",))]
    assert StatefulSetView.of(None).replicas is None and StatefulSetView({"status": {}}).ready_replicas == 0


def test_claim_storage_class_secret_and_cronjob_views():
    claim = ClaimView({"spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "2Gi"}}},
                       "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}})
    assert (claim.requested, claim.capacity, claim.storage_class, claim.bound) == ("2Gi", "1Gi", "fast", True)
    assert StorageClassView({"allowVolumeExpansion": True}).allows_expansion and not StorageClassView({}).allows_expansion
    secret = SecretView({"data": {"secretKey": base64.b64encode(b"s3cret!").decode(), "empty": ""}})
    assert secret.field("secretKey") == "s3cret!" and secret.field("empty") is None and secret.field("nope") is None
    assert SecretView.of(None).field("secretKey") is None
    cron = CronJobView({"spec": {"schedule": "@hourly", "suspend": True}})
    assert (cron.schedule, cron.suspended) == ("@hourly", True) and (CronJobView({}).schedule, CronJobView({}).suspended) == ("", False)


def test_helpers():
    assert dig({"a": {"b": {"c": 1}}}, "a", "b", "c") == 1 and dig({"a": None}, "a", "b") is None and dig(None, "a") is None
    assert epoch_seconds("1970-01-01T00:01:00Z") == 60 and epoch_seconds("") is None and epoch_seconds("soon") is None
    assert size_bytes("1Ki") == 1024 and size_bytes(None) is None and size_bytes("lots") is None
