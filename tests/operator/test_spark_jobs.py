"""ConsumerGroup.spec.sparkJob in the operator: what to apply or delete, the status and
condition it reports, and that the CRD, the builder (ferrymq_spark.k8s_cronjob) and the
operator image agree. The objects on a real API server: tests/k8s/test_spark_operator.py."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes.client.rest import ApiException

from ferrymq_operator import spark_jobs
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.spark_jobs import CONDITION, merge_patch, owned_by, plan
from ferrymq_spark import k8s_cronjob

REPO = Path(__file__).resolve().parents[2]
NAMESRV = "demo-namesrv-0.demo-namesrv-headless.data.svc:9876"


def group(**job) -> dict:
    return {"apiVersion": "ferrymq.io/v1alpha1", "kind": "ConsumerGroup",
            "metadata": {"name": "lake-loader", "namespace": "data", "uid": "g-uid"},
            "spec": {"brokerRef": {"name": "demo"},
                     "sparkJob": {"schedule": "0 * * * *", "topics": ["Orders"], "output": "/lake/orders", **job}}}


def without_spark() -> dict:
    g = group()
    del g["spec"]["sparkJob"]
    return g


def test_plan_applies_the_builders_objects_all_owned_by_the_group():
    p = plan(group(), NAMESRV, None)
    assert p.condition is None and p.delete == []
    assert [(o["apiVersion"], o["kind"]) for o in p.apply] == list(spark_jobs.OWNED_KINDS)
    assert all(owned_by(o, "g-uid") for o in p.apply)
    assert all(o["metadata"]["ownerReferences"][0]["controller"] is True for o in p.apply)
    cron = p.apply[-1]
    args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--namesrv") + 1] == NAMESRV


@pytest.mark.parametrize("last_reason", [None, "NotConfigured"])
def test_plan_without_spark_job_and_none_before_does_nothing(last_reason):
    """A group that never had a sparkJob (or whose objects are gone) costs no API calls."""
    assert plan(without_spark(), NAMESRV, last_reason) == spark_jobs.SparkJobPlan([], [], None)


@pytest.mark.parametrize("last_reason", ["Scheduled", "Suspended", "DeleteFailed", "ApplyFailed", "InvalidSpec"])
def test_plan_after_spark_job_removed_deletes_cronjob_first(last_reason):
    p = plan(without_spark(), None, last_reason)  # no Broker needed to delete
    assert p.apply == [] and (p.condition.status, p.condition.reason) == (False, "NotConfigured")
    assert [k for _, k, _ in p.delete] == ["CronJob", "RoleBinding", "Role", "ServiceAccount"]
    assert {n for _, _, n in p.delete} == {"lake-loader-spark"}


def test_plan_errors_become_conditions_and_touch_nothing():
    for g, namesrv, reason in [(group(), None, "BrokerNotFound"),
                               (group(launcher="SparkOperator"), NAMESRV, "LauncherNotSupported"),
                               (group(topics=[]), NAMESRV, "InvalidSpec"),
                               (group(driver={"memory": "lots"}), NAMESRV, "InvalidSpec")]:
        p = plan(g, namesrv, None)
        assert (p.apply, p.delete, p.condition.type, p.condition.status, p.condition.reason) == \
               ([], [], CONDITION, False, reason), reason
    assert "spec.sparkJob.topics" in plan(group(topics=[]), NAMESRV, None).condition.message


def test_owned_by_matches_the_uid_only():
    obj = {"metadata": {"ownerReferences": [{"uid": "other"}, {"uid": "g-uid"}]}}
    assert owned_by(obj, "g-uid") and not owned_by(obj, "nope") and not owned_by({"metadata": {}}, "g-uid")


def test_in_cluster_namesrv_lists_every_name_server():
    broker = BrokerCluster.from_resource({"metadata": {"name": "demo", "namespace": "data"},
                                          "spec": {"nameServer": {"replicas": 2}}})
    assert spark_jobs.in_cluster_namesrv(broker) == ";".join(
        f"demo-namesrv-{i}.demo-namesrv-headless.data.svc:9876" for i in range(2))


def test_job_selector_matches_the_job_template_labels():
    cron = plan(group(), NAMESRV, None).apply[-1]
    labels = cron["spec"]["jobTemplate"]["metadata"]["labels"]
    for term in spark_jobs.job_selector(group()).split(","):
        k, v = term.split("=")
        assert labels[k] == v


def _cron(**status) -> dict:
    return {"metadata": {"name": "lake-loader-spark", "uid": "c-uid"},
            "spec": {"schedule": "0 * * * *", "suspend": False}, "status": status}


def _job(name, created, *conditions, **status) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": created, "ownerReferences": [{"uid": "c-uid"}]},
            "status": {**status, "conditions": [{"type": t, "status": "True", "message": m} for t, m in conditions]}}


def test_status_and_condition_from_the_cronjob_and_its_runs():
    cron = _cron(lastScheduleTime="2026-01-01T10:00:00Z", lastSuccessfulTime="2026-01-01T09:01:00Z")
    jobs = [_job("a", "2026-01-01T09:00:00Z", ("Complete", ""), startTime="2026-01-01T09:00:00Z"),
            _job("b", "2026-01-01T10:00:00Z", ("Failed", "Job has reached the specified backoff limit"))]
    st = spark_jobs.status_of(cron, jobs)
    assert st == {"cronJob": "lake-loader-spark", "active": 0, "lastScheduleTime": "2026-01-01T10:00:00Z",
                  "lastSuccessfulTime": "2026-01-01T09:01:00Z", "schedule": "0 * * * *", "suspended": False,
                  "lastRun": {"job": "b", "result": "Failed", "message": "Job has reached the specified backoff limit"}}
    c = spark_jobs.ready_condition(st)
    assert (c.status, c.reason) == (True, "Scheduled") and "last run b: Failed" in c.message
    st = spark_jobs.status_of({**cron, "spec": {"schedule": "@daily", "suspend": True}}, [])
    c = spark_jobs.ready_condition(st)
    assert (c.reason, st["suspended"]) == ("Suspended", True) and "not run yet" in c.message


@pytest.mark.parametrize("crd_file", ["ferrymq.io_consumergroups.yaml", "ferrymq.io_topics.yaml"])
def test_status_fields_are_declared_in_the_crd(crd_file):
    """The API server prunes status fields its schema does not declare: everything the
    operator reports must be there."""
    crd = yaml.safe_load((REPO / "crds" / crd_file).read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["sparkJob"]
    cron = _cron(lastScheduleTime="t", lastSuccessfulTime="t")
    st = spark_jobs.status_of(cron, [_job("a", "t", ("Complete", "done"), startTime="t", completionTime="t")])
    assert set(st) <= set(schema["properties"])
    assert set(st["lastRun"]) <= set(schema["properties"]["lastRun"]["properties"])
    assert {"cronJob", "active", "lastScheduleTime", "lastSuccessfulTime", "lastRun", "schedule", "suspended"} == set(st)


@pytest.mark.parametrize("crd_file, other_kinds_fields", [
    ("ferrymq.io_consumergroups.yaml", k8s_cronjob.TOPIC_ONLY), ("ferrymq.io_topics.yaml", k8s_cronjob.GROUP_ONLY)])
def test_every_spark_job_field_the_builder_reads_is_in_the_crd(crd_file, other_kinds_fields):
    """The CRD's sparkJob schema is strict (no unknown fields kept): a field the builder
    reads but the CRD lacks would be pruned before the operator ever saw it."""
    source = Path(k8s_cronjob.__file__).read_text().split("def spark_job_status")[0]  # after it, `job` is a Job
    read = set(re.findall(r'job(?:\.get\(|\[)"(\w+)"', source)) | set(re.findall(r'"(\w+)" in job\b', source))
    read |= {f for f, _ in k8s_cronjob.PUBLISH_FLAGS}  # read as job.get(field) in a loop
    read -= {"instances", "cores", "memory"}  # job["executor"]["cores"] and the like: nested
    read -= other_kinds_fields
    crd = yaml.safe_load((REPO / "crds" / crd_file).read_text())
    spark = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["sparkJob"]
    assert read and read <= set(spark["properties"]), read - set(spark["properties"])
    assert {"instances", "cores", "memory"} <= set(spark["properties"]["executor"]["properties"])
    assert not other_kinds_fields & set(spark["properties"]), "a field of the other kind's job"


def test_merge_patch_removes_what_is_gone():
    old = {"cronJob": "x", "lastRun": {"job": "a", "result": "Failed", "message": "boom"}, "lastScheduleTime": "t"}
    new = {"cronJob": "x", "lastRun": {"job": "b", "result": "Running"}}
    assert merge_patch(old, new) == {"cronJob": "x", "lastRun": {"job": "b", "result": "Running", "message": None},
                                     "lastScheduleTime": None}
    assert merge_patch(None, new) == new


def test_api_error_keeps_the_servers_message():
    e = ApiException(status=403, reason="Forbidden")
    e.body = '{"kind":"Status","message":"roles.rbac.authorization.k8s.io \\"x\\" is forbidden: attempting to grant"}'
    assert spark_jobs.api_error(e).startswith('roles.rbac.authorization.k8s.io "x" is forbidden')
    e.body = "not json"
    assert spark_jobs.api_error(e) == "403 Forbidden"


def test_builder_is_standard_library_only():
    """operator -> ferrymq_spark.k8s_cronjob: the operator image has no pyspark."""
    tree = ast.parse(Path(k8s_cronjob.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_operator_image_installs_ferrymq_spark():
    dockerfile = (REPO / "Dockerfile").read_text()
    copy = dockerfile.index("COPY spark-jobs/ferrymq_spark")
    assert copy < dockerfile.index("pip install"), "copied before the package is installed"
    assert "spark-jobs" not in (REPO / ".dockerignore").read_text().split()


@pytest.mark.parametrize("job", [{"suspend": True}, {"arguments": ["--dry-run"]}])
def test_plan_follows_the_spec(job):
    cron = plan(group(**job), NAMESRV, None).apply[-1]
    if "suspend" in job:
        assert cron["spec"]["suspend"] is True
    else:
        assert cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "--dry-run"
