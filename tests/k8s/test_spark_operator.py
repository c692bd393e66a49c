"""ConsumerGroup.spec.sparkJob through the operator (running with the chart's ServiceAccount):
the CronJob, ServiceAccount, Role and RoleBinding appear owned by the group, its runs show in
the group's status, suspend/removal/deletion are followed.

Runs are fake pods (kwok): a Job's pod completes with exit code 0, or with exit code 1 when it
carries controlplane.FAIL_LABEL. One group uses a yearly schedule (nothing fires by itself:
the runs are the test's); the other runs every minute, to see a run the schedule started."""

from __future__ import annotations

import json

from ferrymq_spark.k8s_cronjob import DRIVER_RULES, PUBLISH_APP, job_name
from tests.k8s.conftest import CLUSTER
from tests.k8s.controlplane import FAIL_LABEL
from testkit.wait import poll_until
from tests.k8s.test_operator import API, broker_cr, condition, wait_status

OPERATOR = "ferrymq-operator"  # its server-side-apply field manager
SPARK_KINDS = ("serviceaccount", "role", "rolebinding", "cronjob")


def spark_group(name: str, schedule: str, **job) -> dict:
    return {"apiVersion": API, "kind": "ConsumerGroup", "metadata": {"name": name},
            "spec": {"brokerRef": {"name": CLUSTER}, "sparkJob": {
                "schedule": schedule, "topics": ["Orders", "Payments"], "output": "s3a://lake/orders",
                "image": "ferrymq/spark:test", "executor": {"instances": 3, "cores": 2, "memory": "2g"},
                "driver": {"cores": 1, "memory": "1g"}, "sparkConf": {"spark.sql.shuffle.partitions": "8"}, **job}}}


def spark_status(cp, group: str, ns: str, pred, what: str, timeout: float = 60) -> dict:
    return wait_status(cp, "consumergroup", group, ns, lambda o: pred((o.get("status") or {}).get("sparkJob") or {}, o),
                       what, timeout)["status"]


def conf_of(args: list[str]) -> dict[str, str]:
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")


def run_job(cp, ns: str, cronjob: dict, name: str, fail: bool) -> None:
    """A run of ``cronjob`` as its controller makes one (its jobTemplate, owned by it); with
    ``fail`` its pod carries FAIL_LABEL, so the fake driver exits 1."""
    template = json.loads(json.dumps(cronjob["spec"]["jobTemplate"]))
    if fail:
        template["spec"]["template"]["metadata"]["labels"][FAIL_LABEL] = "true"
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "labels": template["metadata"]["labels"],
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": cronjob["metadata"]["name"],
                                             "uid": cronjob["metadata"]["uid"], "controller": True}]},
           "spec": template["spec"]}
    cp.apply(job, ns)


def test_operator_runs_a_groups_spark_job_as_an_owned_cronjob(control_plane, operator_logs, namespace):
    cp, ns = control_plane, namespace
    cp.apply([broker_cr(), spark_group("lake-loader", "0 0 1 1 *"), spark_group("every-minute", "* * * * *")], ns)
    group = cp.get("consumergroup", "lake-loader", ns)
    name = job_name(group)
    st = spark_status(cp, "lake-loader", ns, lambda s, o: s.get("cronJob") == name
                      and (condition(o, "SparkJobReady") or {}).get("status") == "True", "sparkJob status")
    assert st["sparkJob"] == {"cronJob": name, "active": 0, "schedule": "0 0 1 1 *", "suspended": False}
    assert condition({"status": st}, "SparkJobReady")["reason"] == "Scheduled"

    # The four objects: made by the operator (its field manager), owned by the group.
    uid = group["metadata"]["uid"]
    for kind in SPARK_KINDS:
        obj = cp.get(kind, name, ns)
        [owner] = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == \
               ("ConsumerGroup", "lake-loader", uid, True, True), kind
        managed = json.loads(cp.kubectl("get", kind, name, "-n", ns, "-o", "json", "--show-managed-fields").stdout)
        assert OPERATOR in {m["manager"] for m in managed["metadata"]["managedFields"]}, kind
    role = cp.get("role", name, ns)
    assert role["rules"] == [{k: r[k] for k in ("apiGroups", "resources", "verbs")} for r in DRIVER_RULES]
    binding = cp.get("rolebinding", name, ns)
    assert binding["roleRef"]["name"] == name and binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
    cron = cp.get("cronjob", name, ns)
    spec = cron["spec"]
    assert (spec["concurrencyPolicy"], spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"], spec["suspend"]) == \
           ("Forbid", 3, 3, False)
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name
    args = pod["containers"][0]["args"]
    assert args[:4] == ["--master", "k8s://https://kubernetes.default.svc", "--deploy-mode", "client"]
    conf = conf_of(args)
    assert conf["spark.kubernetes.namespace"] == ns and conf["spark.kubernetes.container.image"] == "ferrymq/spark:test"
    assert conf["spark.kubernetes.authenticate.oauthTokenFile"].endswith("/serviceaccount/token")
    assert conf["spark.kubernetes.driver.pod.name"] == "$(POD_NAME)" and conf["spark.executor.instances"] == "3"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    # The job's pods reach the Broker's name servers by their in-cluster names (the operator's
    # own FERRYMQ_NAMESRV_OVERRIDES are for the operator only).
    namesrv = args[args.index("--namesrv") + 1]
    assert namesrv == f"{CLUSTER}-namesrv-0.{CLUSTER}-namesrv-headless.{ns}.svc:9876"
    assert args[args.index("--topics") + 1] == "Orders,Payments" and args[args.index("--group") + 1] == "lake-loader"

    # A run started from the CronJob: the fake driver succeeds, the group's status says so.
    cp.kubectl("create", "job", "run-1-manual", f"--from=cronjob/{name}", "-n", ns)
    st = spark_status(cp, "lake-loader", ns, lambda s, o: (s.get("lastRun") or {}).get("job") == "run-1-manual"
                      and s["lastRun"]["result"] == "Succeeded" and s.get("lastSuccessfulTime"), "run-1 Succeeded")
    assert st["sparkJob"]["lastRun"]["completionTime"] and st["sparkJob"]["active"] == 0
    assert "last run run-1-manual: Succeeded" in condition({"status": st}, "SparkJobReady")["message"]

    # A run whose driver exits 1 (backoffLimit 0: the Job fails at once).
    run_job(cp, ns, cron, "run-2-failed", fail=True)
    st = spark_status(cp, "lake-loader", ns, lambda s, o: (s.get("lastRun") or {}).get("job") == "run-2-failed"
                      and s["lastRun"]["result"] == "Failed", "run-2 Failed")
    assert st["sparkJob"]["lastSuccessfulTime"], "the last success is still reported"
    assert "backoff limit" in st["sparkJob"]["lastRun"].get("message", "")
    table = cp.kubectl("get", "consumergroup", "lake-loader", "-n", ns, "-o", "wide").stdout
    assert "LAST-RUN" in table and "Failed" in table

    # suspend is followed.
    cp.kubectl("patch", "consumergroup", "lake-loader", "-n", ns, "--type=merge", "-p", '{"spec":{"sparkJob":{"suspend":true}}}')
    spark_status(cp, "lake-loader", ns, lambda s, o: s.get("suspended") is True
                 and (condition(o, "SparkJobReady") or {}).get("reason") == "Suspended", "suspended")
    assert cp.get("cronjob", name, ns)["spec"]["suspend"] is True

    # Removing sparkJob deletes the four objects (and the CronJob's Jobs with it); the status goes.
    cp.kubectl("patch", "consumergroup", "lake-loader", "-n", ns, "--type=merge", "-p", '{"spec":{"sparkJob":null}}')
    st = spark_status(cp, "lake-loader", ns, lambda s, o: not s and (condition(o, "SparkJobReady") or {}).get("reason") == "NotConfigured",
                      "sparkJob status removed")
    poll_until("spark objects deleted", lambda: all(cp.get(k, name, ns) is None for k in SPARK_KINDS), 60)
    poll_until("its Jobs deleted", lambda: not cp.get("jobs", None, ns)["items"] or
               all(j["metadata"]["ownerReferences"][0]["name"] != name for j in cp.get("jobs", None, ns)["items"]), 60)
    assert (condition({"status": st}, "Ready") or {}).get("status") == "True", "the group itself is untouched"

    # The every-minute group: a run the schedule started (lastScheduleTime). Its CronJob was
    # created at the start, so this waits at most until the next minute boundary.
    every = cp.get("consumergroup", "every-minute", ns)
    every_name = job_name(every)
    st = spark_status(cp, "every-minute", ns, lambda s, o: s.get("lastScheduleTime") and s.get("lastSuccessfulTime")
                      and (s.get("lastRun") or {}).get("result") == "Succeeded", "scheduled run", 90)["sparkJob"]
    assert st["lastRun"]["job"].startswith(f"{every_name}-")

    # Deleting a group garbage-collects its Spark objects (owner references).
    cp.kubectl("delete", "consumergroup", "every-minute", "-n", ns, "--timeout=60s")
    poll_until("spark objects garbage-collected", lambda: all(cp.get(k, every_name, ns) is None for k in SPARK_KINDS), 90)


def test_operator_runs_a_topics_publish_job_as_an_owned_cronjob(control_plane, operator_logs, ferry_cluster, namespace):
    """Topic.spec.sparkJob: a scheduled publish of new input files to the topic, the same
    objects and status as a group's drain, with publish_to_topic.py's arguments."""
    cp, ns = control_plane, namespace
    topic = {"apiVersion": API, "kind": "Topic", "metadata": {"name": "outbox"},
             "spec": {"brokerRef": {"name": CLUSTER}, "topicName": "Outbox", "sparkJob": {
                 "schedule": "0 0 1 1 *", "input": "s3a://outbox/orders", "checkpoint": "s3a://ckpt/orders",
                 "format": "json", "keys": "CAST(id AS STRING)", "image": "ferrymq/spark:test"}}}
    cp.apply([broker_cr(), topic], ns)
    uid = cp.get("topic", "outbox", ns)["metadata"]["uid"]
    name = job_name(cp.get("topic", "outbox", ns))
    st = wait_status(cp, "topic", "outbox", ns, lambda o: ((o.get("status") or {}).get("sparkJob") or {}).get("cronJob") == name
                     and (condition(o, "SparkJobReady") or {}).get("status") == "True", "the publish job's status")["status"]
    assert st["sparkJob"]["schedule"] == "0 0 1 1 *"
    for kind in SPARK_KINDS:
        [owner] = cp.get(kind, name, ns)["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Topic", "outbox", uid), kind
    args = cp.get("cronjob", name, ns)["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    app = args.index(PUBLISH_APP)
    assert args[app + 1:] == ["--namesrv", f"{CLUSTER}-namesrv-0.{CLUSTER}-namesrv-headless.{ns}.svc:9876",
                              "--topic", "Outbox", "--input", "s3a://outbox/orders", "--format", "json",
                              "--checkpoint", "s3a://ckpt/orders", "--keys", "CAST(id AS STRING)"]

    cp.kubectl("create", "job", "publish-1", f"--from=cronjob/{name}", "-n", ns)
    wait_status(cp, "topic", "outbox", ns, lambda o: (((o.get("status") or {}).get("sparkJob") or {}).get("lastRun") or {})
                .get("result") == "Succeeded", "the run Succeeded")
    assert "LAST-RUN" in cp.kubectl("get", "topic", "outbox", "-n", ns, "-o", "wide").stdout

    cp.kubectl("patch", "topic", "outbox", "-n", ns, "--type=merge", "-p", '{"spec":{"sparkJob":null}}')
    poll_until("publish job objects deleted", lambda: all(cp.get(k, name, ns) is None for k in SPARK_KINDS), 60)
    wait_status(cp, "topic", "outbox", ns, lambda o: not (o.get("status") or {}).get("sparkJob")
                and (condition(o, "Ready") or {}).get("status") == "True", "the topic itself still Ready")
