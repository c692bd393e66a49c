"""The operator's leader election (leadership.py) against an in-memory Lease store with the
API server's compare-and-swap, and the pure decisions behind a raised spec.storage.size
(storage.py) and StatefulSets whose immutable fields changed (rollout.statefulset_recreate_reason).
The same paths on a real API server: tests/k8s/test_operator_ha.py."""

from __future__ import annotations

import asyncio
import copy
import time
import urllib.request

import pytest

from ferrymq.kube import Conflict, KubeConnectionError, NotFound
from ferrymq_operator import manifests, rollout, storage
from ferrymq_operator.leadership import EXIT_LEADERSHIP_LOST, LeaderElectionSettings, Leadership
from ferrymq_operator.model import BrokerCluster
from testkit.ports import free_port
from testkit.wait import wait_until


class FakeLeases:
    """get/create/replace of Leases with resourceVersion compare-and-swap; ``down`` makes
    every request fail as an unreachable API server would."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict] = {}
        self.version = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise KubeConnectionError("API server unreachable")

    async def get(self, resource, namespace, name, *, timeout=None):
        self._check()
        if (namespace, name) not in self.objects:
            raise NotFound(404, "NotFound", f"{name} not found")
        return copy.deepcopy(self.objects[(namespace, name)])

    async def create(self, resource, namespace, body, *, timeout=None):
        self._check()
        key = (namespace, body["metadata"]["name"])
        if key in self.objects:
            raise Conflict(409, "AlreadyExists", "exists")
        return self._store(key, body)

    async def replace(self, resource, namespace, name, body, *, timeout=None):
        self._check()
        key = (namespace, name)
        if self.objects[key]["metadata"]["resourceVersion"] != body["metadata"].get("resourceVersion"):
            raise Conflict(409, "Conflict", "the object has been modified")
        return self._store(key, body)

    def _store(self, key, body) -> dict:
        self.version += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.objects[key] = obj
        return copy.deepcopy(obj)

    async def close(self) -> None:
        pass

    def holder(self) -> str:
        lease = self.objects.get(("ops", "ferrymq-operator"))
        return (lease or {}).get("spec", {}).get("holderIdentity", "")


def settings(identity: str) -> LeaderElectionSettings:
    return LeaderElectionSettings(namespace="ops", lease_name="ferrymq-operator", identity=identity,
                                  lease_duration=1.5, renew_deadline=1.0, retry_period=0.2)


def test_settings_from_the_charts_environment():
    assert LeaderElectionSettings.from_env({}) is None
    env = {"FERRYMQ_LEADER_ELECTION": "true", "POD_NAMESPACE": "ferrymq-system", "POD_NAME": "op-7d9-x",
           "FERRYMQ_LEASE_NAME": "r-ferrymq-operator", "FERRYMQ_LEASE_DURATION_SECONDS": "15",
           "FERRYMQ_LEASE_RENEW_DEADLINE_SECONDS": "10", "FERRYMQ_LEASE_RETRY_PERIOD_SECONDS": "2"}
    s = LeaderElectionSettings.from_env(env)
    assert (s.namespace, s.lease_name, s.identity, s.lease_duration, s.renew_deadline, s.retry_period) == (
        "ferrymq-system", "r-ferrymq-operator", "op-7d9-x", 15.0, 10.0, 2.0)
    with pytest.raises(ValueError, match="renew deadline"):
        LeaderElectionSettings.from_env({**env, "FERRYMQ_LEASE_RENEW_DEADLINE_SECONDS": "20"})


async def test_one_leads_the_standby_answers_liveness_and_takes_over_after_a_clean_release():
    api = FakeLeases()
    exits: list[int] = []
    a, b = Leadership(settings("a"), api, exits.append), Leadership(settings("b"), api, exits.append)
    await a.acquired()
    assert api.holder() == "a"
    port = free_port()
    standby = asyncio.create_task(b.acquired(health_port=port))

    def healthz() -> bool:  # in a thread: the server answers on this loop
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False
    assert await wait_until(lambda: asyncio.to_thread(healthz), 5, "the standby's /healthz")
    assert not standby.done() and api.holder() == "a"
    await a.release()  # a clean shutdown gives the Lease up at once
    await asyncio.wait_for(standby, 5)
    assert api.holder() == "b" and exits == []
    assert not await asyncio.to_thread(healthz), "the standby's endpoint is closed for kopf's"
    await b.release()


async def test_a_leader_that_cannot_renew_exits_before_anyone_else_may_lead():
    api = FakeLeases()
    exits: list[int] = []
    leader = Leadership(settings("a"), api, exits.append)
    await leader.acquired()
    api.down = True
    lost_at = await wait_until(lambda: exits, 5, "the leader to exit")
    assert lost_at == [EXIT_LEADERSHIP_LOST]
    assert leader.elector is not None and not leader.elector.is_leader
    await leader.release()


async def test_a_leader_whose_loop_stalled_past_the_deadline_exits_at_its_next_write():
    """Frozen or starved past the renew deadline, the leader has not run its renewal loop yet;
    the check before every reconcile and API write (handlers.py, kube.write_guard) finds the
    deadline passed and exits before anything is written."""
    api = FakeLeases()
    exits: list[int] = []
    leader = Leadership(settings("a"), api, exits.append)
    await leader.acquired()
    leader.check()
    assert exits == []
    time.sleep(settings("a").renew_deadline + 0.1)  # the loop stalls (no await: the elector cannot run)
    leader.check()
    assert exits == [EXIT_LEADERSHIP_LOST]
    await leader.release()


async def test_a_leader_that_sees_another_holder_exits():
    api = FakeLeases()
    exits: list[int] = []
    leader = Leadership(settings("a"), api, exits.append)
    await leader.acquired()
    lease = api.objects[("ops", "ferrymq-operator")]
    await api.replace(None, "ops", "ferrymq-operator", {**lease, "spec": {**lease["spec"], "holderIdentity": "z"}})
    assert await wait_until(lambda: exits, 5, "the leader to exit") == [EXIT_LEADERSHIP_LOST]
    await leader.release()


# ---------------------------------------------------------------------------- storage.size raised

def pvc(name: str, requested: str, capacity: str | None = None, cls: str | None = "fast", phase: str = "Bound") -> dict:
    return {"metadata": {"name": name}, "spec": {"storageClassName": cls, "resources": {"requests": {"storage": requested}}},
            "status": {"phase": phase, **({"capacity": {"storage": capacity}} if capacity else {})}}


def test_claims_grow_where_the_class_allows_it_and_the_condition_says_which_cannot():
    claims = [pvc("data-b-0", "10Gi", "10Gi"), pvc("data-b-1", "10Gi", "10Gi", cls="slow"),
              pvc("data-b-2", "20Gi", "10Gi"), pvc("data-b-3", "20Gi", "20Gi"), pvc("data-b-4", "10Gi", cls=None),
              pvc("data-b-5", "10Gi", phase="Pending")]
    assert storage.classes_to_read(claims, "20Gi") == {"fast", "slow"}
    plan = storage.plan_expansion(claims, "20Gi", {"fast": {"allowVolumeExpansion": True}, "slow": {}})
    assert plan.expand == ["data-b-0"]
    assert plan.resizing == ["data-b-2"]
    assert set(plan.not_expandable) == {"data-b-1", "data-b-4", "data-b-5"}
    assert "does not allow volume expansion" in plan.not_expandable["data-b-1"]
    cond = storage.storage_condition(plan)
    assert (cond.type, cond.status, cond.reason) == ("StorageResized", False, "ExpansionNotSupported")
    assert "data-b-1" in cond.message and "claims created from now on" in cond.message
    assert storage.expansion_patch("20Gi") == {"spec": {"resources": {"requests": {"storage": "20Gi"}}}}


def test_the_condition_reads_resizing_then_done():
    claims = [pvc("data-b-0", "10Gi", "10Gi")]
    plan = storage.plan_expansion(claims, "1.5Ti", {"fast": {"allowVolumeExpansion": True}})
    assert plan.expand == ["data-b-0"]
    assert storage.storage_condition(plan).reason == "Resizing"
    plan = storage.plan_expansion([pvc("data-b-0", "1536Gi", "1536Gi")], "1.5Ti", {})
    assert plan.done and storage.storage_condition(plan).status is True
    assert storage.plan_expansion([pvc("data-b-0", "10Gi", cls="gone")], "20Gi", {"gone": None}).not_expandable == {
        "data-b-0": "its StorageClass gone does not exist"}


def broker(**spec) -> BrokerCluster:
    return BrokerCluster.from_resource({"metadata": {"name": "demo", "namespace": "prod", "uid": "u"},
                                        "spec": {"replicas": 2, **spec}})


def as_stored(sts: dict) -> dict:
    """What the API server hands back: defaults added, the claim template's quantity canonical."""
    out = copy.deepcopy(sts)
    for t in out["spec"].get("volumeClaimTemplates") or []:
        t["spec"]["volumeMode"] = "Filesystem"
        t["status"] = {"phase": "Pending"}
        t["apiVersion"], t["kind"] = "v1", "PersistentVolumeClaim"
    out["spec"]["revisionHistoryLimit"] = 10
    return out


def test_only_changes_the_api_server_refuses_recreate_a_statefulset():
    current = as_stored(manifests.broker_statefulset(broker()))
    assert rollout.statefulset_recreate_reason(current, manifests.broker_statefulset(broker())) == ""
    # patchable changes: replicas, image, config, spread
    for spec in ({"replicas": 5}, {"image": "ferrymq/broker:2"}, {"config": {"flushDiskType": "SYNC_FLUSH"}}):
        assert rollout.statefulset_recreate_reason(current, manifests.broker_statefulset(broker(**spec))) == ""
    grown = manifests.broker_statefulset(broker(storage={"size": "20Gi"}))
    assert rollout.statefulset_recreate_reason(current, grown) == "volumeClaimTemplates storage size"
    same_size = manifests.broker_statefulset(broker(storage={"size": "10240Mi"}))
    assert rollout.statefulset_recreate_reason(current, same_size) == ""


def test_the_single_controller_with_a_claim_is_recreated_as_two_without():
    old = {"spec": {"replicas": 1, "serviceName": "demo-controller", "podManagementPolicy": "OrderedReady",
                    "selector": {"matchLabels": manifests.selector_labels(broker(), "controller")},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                              "spec": {"accessModes": ["ReadWriteOnce"],
                                                       "resources": {"requests": {"storage": "1Gi"}}}}]}}
    c = broker(replication={"slavesPerGroup": 1, "failover": True})
    reason = rollout.statefulset_recreate_reason(old, manifests.controller_statefulset(c))
    assert reason == "podManagementPolicy OrderedReady -> Parallel, volumeClaimTemplates"
    assert rollout.statefulset_recreate_reason(as_stored(manifests.controller_statefulset(c)),
                                               manifests.controller_statefulset(c)) == ""
