"""ConsumerGroup.spec.sparkJob and Topic.spec.sparkJob -> the CronJob (and its ServiceAccount,
Role, RoleBinding) that drains the group, or publishes new files to the topic, on a schedule,
kept in step with the spec, and its status.

What those objects look like is the Spark side's knowledge: ``ferrymq_spark.k8s_cronjob``
builds them (pure, standard library only, installed with the ``ferrymq`` package). This
module decides what to apply, what to delete and what the group's status says; ``sync`` does
it through ``kube``. Dependency: operator -> ferrymq_spark.k8s_cronjob, and nothing else of
ferrymq_spark (the rest needs pyspark, which the operator image does not carry).

The job's pods run inside the cluster, so they get the Broker's in-cluster name-server
addresses, never the operator's FERRYMQ_NAMESRV_OVERRIDES (those are how the operator
itself reaches brokers from wherever it runs).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from kubernetes.client.rest import ApiException

from ferrymq_operator import conditions, kube
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.conditions import Condition
from ferrymq_operator.views import CronJobView, ObjectView, ResourceView
from ferrymq_spark import k8s_cronjob as builder

log = logging.getLogger("ferrymq.operator")

CONDITION = "SparkJobReady"
RBAC = "rbac.authorization.k8s.io/v1"
# What build_spark_job returns for the SparkSubmit launcher, in apply order. Deleted in the
# reverse order: the CronJob first, so nothing is scheduled while its RBAC goes away.
OWNED_KINDS: tuple[tuple[str, str], ...] = (("v1", "ServiceAccount"), (RBAC, "Role"), (RBAC, "RoleBinding"),
                                            ("batch/v1", "CronJob"))


@dataclass(frozen=True)
class SparkJobPlan:
    apply: list[dict]                       # objects to server-side apply, in order
    delete: list[tuple[str, str, str]]      # (apiVersion, kind, name): delete where the group owns it
    condition: Condition | None             # decided without the API server (error, not configured)


def in_cluster_namesrv(cluster: BrokerCluster) -> str:
    """The Broker's name servers as its pods reach them (their stable DNS names)."""
    return ";".join(cluster.namesrv_addresses)


def plan(group: dict, namesrv_addr: str | None, last_reason: str | None) -> SparkJobPlan:
    """What to do for ``group``. ``namesrv_addr`` None: its Broker does not exist (the job
    could not reach anything, so its objects are left as they are). ``last_reason``: the
    reason of the group's SparkJobReady condition, None if it has none.

    Without a sparkJob, the objects are looked for (and deleted) only while the status says
    there may be some: a group that never had a sparkJob, or whose objects are gone
    (NotConfigured), costs no API calls. (Objects applied just before an operator crash that
    lost the status write stay until the group is deleted: they are owned by it.)"""
    job = ResourceView(group).spec.get("sparkJob")
    name = builder.job_name(group)
    if not job:
        if last_reason in (None, "NotConfigured"):
            return SparkJobPlan([], [], None)
        return SparkJobPlan([], [(av, kind, name) for av, kind in reversed(OWNED_KINDS)],
                            Condition(CONDITION, False, "NotConfigured", "spec.sparkJob is not set"))
    if namesrv_addr is None:
        return SparkJobPlan([], [], Condition(CONDITION, False, "BrokerNotFound",
                                              "the Broker does not exist: the Spark job's objects are left as they are"))
    if job.get("launcher", "SparkSubmit") != "SparkSubmit":
        return SparkJobPlan([], [], Condition(CONDITION, False, "LauncherNotSupported",
                                              f"spec.sparkJob.launcher {job.get('launcher')!r}: this operator runs "
                                              "Spark jobs with spark-submit only (launcher: SparkSubmit)"))
    try:
        objects = builder.build_spark_job(group, namesrv_addr)
    except builder.SparkJobSpecError as e:
        return SparkJobPlan([], [], Condition(CONDITION, False, "InvalidSpec", str(e)))
    return SparkJobPlan(objects, [], None)


def owned_by(obj: dict, uid: str) -> bool:
    return ObjectView(obj).owned_by(uid)


def job_selector(group: dict) -> str:
    """The labels every Job of the group's CronJob carries (from its jobTemplate)."""
    labels = builder.labels(group)
    keys = (builder.LABEL_INSTANCE, builder.LABEL_COMPONENT)
    return ",".join(f"{k}={labels[k]}" for k in keys)


def status_of(cronjob: dict, jobs: list[dict]) -> dict:
    """status.sparkJob: the builder's view of the CronJob and its runs, plus its schedule."""
    out = builder.spark_job_status(cronjob, jobs)
    view = CronJobView(cronjob)
    out["schedule"] = view.schedule
    out["suspended"] = view.suspended
    return out


def ready_condition(spark_status: dict) -> Condition:
    where = f"CronJob {spark_status['cronJob']} ({spark_status['schedule']})"
    last = spark_status.get("lastRun")
    run = f"; last run {last['job']}: {last['result']}" if last else "; not run yet"
    if spark_status.get("suspended"):
        return Condition(CONDITION, True, "Suspended", f"{where} is suspended{run}")
    return Condition(CONDITION, True, "Scheduled", f"{where}{run}")


def merge_patch(old: dict | None, new: dict) -> dict:
    """The JSON-merge-patch value that turns ``old`` into ``new``: keys ``new`` lacks are set
    to None (a merge patch keeps whatever it does not mention)."""
    out: dict = {}
    for key, value in new.items():
        prev = (old or {}).get(key)
        out[key] = merge_patch(prev, value) if isinstance(value, dict) and isinstance(prev, dict) else value
    for key in (old or {}):
        if key not in new:
            out[key] = None
    return out


def api_error(e: ApiException) -> str:
    """The API server's own message (it names the field or the missing permission)."""
    try:
        return json.loads(e.body).get("message") or str(e.reason)
    except (TypeError, ValueError, AttributeError):
        return f"{e.status} {e.reason}"


@dataclass(frozen=True)
class SparkJobResult:
    condition: Condition | None
    status_patch: dict | None       # value for status.sparkJob (None: leave it as it is)
    remove_status: bool = False     # status.sparkJob goes (sparkJob removed from the spec)


async def sync(group: dict, namesrv_addr: str | None, status: dict) -> SparkJobResult:
    """Apply or delete the group's Spark objects and read their state. API errors become the
    condition's message (the rest of the group's reconcile goes on)."""
    res = ResourceView(group)
    last = conditions.get(status.get("conditions"), CONDITION)
    p = plan(group, namesrv_addr, last.get("reason") if last else None)
    old = status.get("sparkJob")
    try:
        cronjob = None
        for obj in p.apply:
            applied = await kube.apply(obj)
            if obj["kind"] == "CronJob":
                cronjob = applied
        uid, ns = res.uid, res.namespace
        for api_version, kind, name in p.delete:
            existing = await kube.get(api_version, kind, ns, name)
            if existing is not None and uid and owned_by(existing, uid):
                log.info("deleting %s %s/%s: spec.sparkJob was removed", kind, ns, name)
                await kube.delete(api_version, kind, ns, name, uid=ObjectView(existing).uid, propagation="Background")
        if cronjob is None:  # nothing applied: not configured (status goes with it), or an error
            configured = bool(res.spec.get("sparkJob"))
            return SparkJobResult(p.condition, None, remove_status=not configured and bool(old))
        jobs = await kube.list_("batch/v1", "Job", ns, job_selector(group))
    except ApiException as e:
        what = "delete" if p.delete else "apply"
        hint = (" (the operator chart's values rbac.sparkJobs, and rbac.sparkJobVolumes for on-demand executor "
                "volumes, grant what this needs)") if e.status == 403 else ""
        return SparkJobResult(Condition(CONDITION, False, "DeleteFailed" if p.delete else "ApplyFailed",
                                        f"cannot {what} the Spark job's objects: {api_error(e)}{hint}"), None)
    new = status_of(cronjob, jobs)
    return SparkJobResult(ready_condition(new), merge_patch(old, new))


async def sync_into(resource: dict, cluster: BrokerCluster | None, current_status: dict,
                    conditions_out: list[Condition], fields_out: dict) -> None:
    """A reconcile step of a ConsumerGroup or Topic: :func:`sync`, its condition added to
    ``conditions_out`` and its status to ``fields_out`` (first in a reconcile, as it does not
    depend on the brokers)."""
    spark = await sync(resource, in_cluster_namesrv(cluster) if cluster else None, current_status)
    if spark.condition:
        conditions_out.append(spark.condition)
    if spark.status_patch is not None or spark.remove_status:
        fields_out["sparkJob"] = spark.status_patch
