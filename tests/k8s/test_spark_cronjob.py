"""ConsumerGroup.spec.sparkJob -> ServiceAccount, Role, RoleBinding and CronJob, applied to the
local control plane's real API server: accepted, owned by the ConsumerGroup (garbage
collection removes them with it), RBAC limited to what a client-mode Spark driver needs."""

from __future__ import annotations

from ferrymq_spark.k8s_cronjob import build_spark_job, job_name
from tests.k8s.conftest import CLUSTER
from testkit.wait import poll_until

API = "ferrymq.io/v1alpha1"


def sample_group(ns: str) -> dict:
    return {"apiVersion": API, "kind": "ConsumerGroup", "metadata": {"name": "lake-loader", "namespace": ns},
            "spec": {"brokerRef": {"name": CLUSTER}, "sparkJob": {
                "schedule": "*/30 * * * *", "topics": ["Orders", "Payments"], "output": "s3a://lake/orders",
                "image": "ferrymq/spark:test", "executor": {"instances": 3, "cores": 2, "memory": "2g"},
                "driver": {"cores": 1, "memory": "1g"}, "sparkConf": {"spark.sql.shuffle.partitions": "8"}}}}


def can_i(cp, ns: str, sa: str, verb: str, resource: str, namespace: str | None = None) -> bool:
    out = cp.kubectl("auth", "can-i", verb, resource, f"--as=system:serviceaccount:{ns}:{sa}", "-n", namespace or ns,
                     check=False)
    return out.stdout.strip() == "yes"


def test_spark_cronjob_is_accepted_owned_and_least_privileged(control_plane, helm_release, namespace):
    cp, ns = control_plane, namespace
    cp.apply(sample_group(ns), ns)
    group = cp.get("consumergroup", "lake-loader", ns)
    objects = build_spark_job(group, namesrv_addr=f"{CLUSTER}-namesrv.{ns}.svc:9876")
    assert [o["kind"] for o in objects] == ["ServiceAccount", "Role", "RoleBinding", "CronJob"]
    cp.apply(objects, ns)  # the API server validates every object (a bad field fails here)

    name = job_name(group)
    cron = cp.get("cronjob", name, ns)
    assert cron is not None
    for kind in ("serviceaccount", "role", "rolebinding", "cronjob"):
        obj = cp.get(kind, name, ns)
        [owner] = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == \
               ("ConsumerGroup", "lake-loader", group["metadata"]["uid"], True)
    spec = cron["spec"]
    assert (spec["concurrencyPolicy"], spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == ("Forbid", 3, 3)
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name and pod["securityContext"]["runAsNonRoot"] is True
    args = pod["containers"][0]["args"]
    assert args[:4] == ["--master", "k8s://https://kubernetes.default.svc", "--deploy-mode", "client"]

    # RBAC: what a client-mode driver needs for its executors, in its namespace, and nothing else.
    for verb, resource in [("create", "pods"), ("watch", "pods"), ("delete", "pods"), ("deletecollection", "pods"),
                           ("create", "configmaps"), ("delete", "configmaps")]:
        assert can_i(cp, ns, name, verb, resource), f"{verb} {resource}"
    for verb, resource in [("get", "secrets"), ("create", "deployments"), ("create", "services"),
                           ("create", "persistentvolumeclaims"), ("create", "cronjobs"), ("create", "roles")]:
        assert not can_i(cp, ns, name, verb, resource), f"{verb} {resource} should be denied"
    assert not can_i(cp, ns, name, "create", "pods", namespace="default")

    # A run of the schedule: the Job controller accepts the template and creates the driver pod.
    cp.kubectl("create", "job", "lake-loader-manual", f"--from=cronjob/{name}", "-n", ns)
    poll_until("driver pod created", lambda: cp.kubectl("get", "pods", "-n", ns, "-l", "job-name=lake-loader-manual",
                                                        "-o", "name", check=False).stdout.strip(), 60)

    # Owned by the group: deleting it garbage-collects the CronJob and its RBAC.
    cp.kubectl("delete", "consumergroup", "lake-loader", "-n", ns)
    poll_until("spark objects garbage-collected", lambda: all(cp.get(k, name, ns) is None for k in
                                                               ("cronjob", "role", "rolebinding", "serviceaccount")), 90)
