"""The CronJob builder for ConsumerGroup.spec.sparkJob and Topic.spec.sparkJob, checked without a cluster (the
tests/k8s layer applies the same objects to a real API server)."""

from __future__ import annotations

import re

import pytest

from testkit.processes import REPO

from ferrymq_spark.k8s_cronjob import (
    DEFAULT_APP,
    PUBLISH_APP,
    SparkJobSpecError,
    build_spark_job,
    job_name,
    spark_job_status,
)

# spark.kubernetes.* properties from Spark's "Running on Kubernetes" page (apache/spark/docs/running-on-kubernetes.md)
# that the builder may set; [Name] entries are documented prefixes.
DOCUMENTED = {
    "spark.kubernetes.namespace", "spark.kubernetes.container.image", "spark.kubernetes.container.image.pullPolicy",
    "spark.kubernetes.authenticate.caCertFile", "spark.kubernetes.authenticate.oauthTokenFile",
    "spark.kubernetes.driver.pod.name", "spark.kubernetes.executor.podNamePrefix",
    "spark.kubernetes.executor.request.cores", "spark.kubernetes.executor.limit.cores",
    "spark.kubernetes.executor.label.[LabelName]",
}


def documented(key: str) -> bool:
    return key in DOCUMENTED or any(key.startswith(d.split("[")[0]) for d in DOCUMENTED if "[" in d)


def group(**job) -> dict:
    spark_job = {"schedule": "0 * * * *", "topics": "Orders, Payments", "output": "/lake/orders", **job}
    return {"apiVersion": "ferrymq.io/v1alpha1", "kind": "ConsumerGroup",
            "metadata": {"name": "lake-loader", "namespace": "data", "uid": "u-1"},
            "spec": {"brokerRef": {"name": "demo"}, "groupName": "LakeLoader", "sparkJob": spark_job}}


def conf_of(args: list[str]) -> dict[str, str]:
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")


def test_cronjob_runs_spark_submit_in_client_mode_with_documented_settings():
    sa, role, binding, cron = build_spark_job(group(), "demo-namesrv.data.svc:9876")
    assert cron["kind"] == "CronJob" and cron["metadata"]["namespace"] == "data"
    spec = cron["spec"]
    assert (spec["schedule"], spec["suspend"], spec["concurrencyPolicy"]) == ("0 * * * *", False, "Forbid")
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == sa["metadata"]["name"]
    container = pod["containers"][0]
    args = container["args"]
    assert container["command"] == ["spark-submit"]
    assert args[:4] == ["--master", "k8s://https://kubernetes.default.svc", "--deploy-mode", "client"]
    app = args.index(DEFAULT_APP)
    assert args[app + 1:] == ["--namesrv", "demo-namesrv.data.svc:9876", "--group", "LakeLoader",
                              "--topics", "Orders,Payments", "--output", "/lake/orders"]
    conf = conf_of(args[:app])
    k8s_keys = [k for k in conf if k.startswith("spark.kubernetes.")]
    assert k8s_keys and all(documented(k) for k in k8s_keys), [k for k in k8s_keys if not documented(k)]
    assert conf["spark.kubernetes.driver.pod.name"] == "$(POD_NAME)"  # expanded by the kubelet from env
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "$(POD_IP)", "executors dial the bind address on Spark >= 4.1"
    env = {e["name"] for e in container["env"]}
    assert {"POD_NAME", "POD_IP"} <= env
    assert conf["spark.executor.instances"] == "2" and conf["spark.kubernetes.namespace"] == "data"
    # Owned by the ConsumerGroup; the Role allows pods and configmaps only.
    for obj in (sa, role, binding, cron):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert sorted(r["resources"][0] for r in role["rules"]) == ["configmaps", "pods"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "data"}]


def test_spec_fields_are_honoured():
    objs = build_spark_job(group(suspend=True, image="reg/spark:1", executor={"instances": 5, "cores": 3, "memory": "4g"},
                                 driver={"memory": "2g"}, arguments=["--min-partitions", "16"],
                                 sparkConf={"spark.executor.instances": "7",
                                            "spark.kubernetes.executor.volumes.persistentVolumeClaim.d.options.claimName": "OnDemand"},
                                 successfulJobsHistoryLimit=1, failedJobsHistoryLimit=5, activeDeadlineSeconds=3600), "ns:9876")
    role, cron = objs[1], objs[3]
    spec = cron["spec"]
    assert spec["suspend"] is True and (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (1, 5)
    assert spec["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 3600
    container = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "reg/spark:1"
    conf = conf_of(container["args"])
    assert conf["spark.executor.instances"] == "7"  # sparkConf wins
    assert conf["spark.executor.cores"] == "3" and conf["spark.kubernetes.container.image"] == "reg/spark:1"
    assert container["args"][-2:] == ["--min-partitions", "16"]
    assert container["resources"]["limits"]["memory"] == "2867Mi"  # 2g + 40% non-JVM overhead
    assert "persistentvolumeclaims" in [r["resources"][0] for r in role["rules"]]


def test_names_fit_kubernetes_limits():
    g = group()
    g["metadata"]["name"] = "a-very-long-consumer-group-name-that-goes-on-and-on-and-on"
    name = job_name(g)
    assert len(name) <= 52 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert job_name(g) != job_name({"metadata": {"name": g["metadata"]["name"] + "x"}})


@pytest.mark.parametrize("job, message", [
    ({"schedule": ""}, "schedule is required"),
    ({"topics": []}, "topics is required"),
    ({"output": None}, "output is required"),
    ({"schedule": "hourly"}, "is not a cron schedule"),
    ({"launcher": "Airflow"}, "launcher must be SparkSubmit or SparkOperator"),
    ({"executor": {"instances": 0}}, "instances must be at least 1"),
    ({"driver": {"memory": "lots"}}, "is not a Spark size"),
    ({"sparkConf": {"spark.kubernetes.driver.volumes.persistentVolumeClaim.out.options.claimName": "c"}},
     "out.mount.path is required"),
    ({"sparkConf": {"spark.kubernetes.driver.volumes.persistentVolumeClaim.out.mount.path": "/o",
                    "spark.kubernetes.driver.volumes.persistentVolumeClaim.out.options.claimName": "OnDemand"}},
     "must name an existing claim"),
])
def test_bad_spark_job_specs_are_one_clear_error(job, message):
    with pytest.raises(SparkJobSpecError, match=message):
        build_spark_job(group(**job), "ns:9876")


def test_driver_volumes_from_spark_conf_are_mounted_in_the_driver_pod():
    """Client mode: the CronJob's pod is the driver, so Spark's driver volume keys land on it."""
    pvc = "spark.kubernetes.{}.volumes.persistentVolumeClaim.out.{}"
    conf = {pvc.format(role, key): value for role in ("driver", "executor")
            for key, value in (("mount.path", "/output"), ("options.claimName", "drain-output"))}
    conf["spark.kubernetes.driver.volumes.emptyDir.scratch.mount.path"] = "/scratch"
    objs = build_spark_job(group(sparkConf=conf), "ns:9876")
    cron = next(o for o in objs if o["kind"] == "CronJob")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "out", "persistentVolumeClaim": {"claimName": "drain-output"}},
                              {"name": "scratch", "emptyDir": {}}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "out", "mountPath": "/output", "readOnly": False},
                                                     {"name": "scratch", "mountPath": "/scratch", "readOnly": False}]
    # Spark itself mounts the executors' side from the same keys.
    args = conf_of(pod["containers"][0]["args"])
    assert args[pvc.format("executor", "options.claimName")] == "drain-output"
    plain = next(o for o in build_spark_job(group(), "ns:9876") if o["kind"] == "CronJob")
    assert "volumes" not in plain["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def test_spark_operator_launcher_builds_a_scheduled_spark_application():
    *_, app = build_spark_job(group(launcher="SparkOperator"), "ns:9876")
    assert (app["apiVersion"], app["kind"]) == ("sparkoperator.k8s.io/v1beta2", "ScheduledSparkApplication")
    t = app["spec"]["template"]
    assert app["spec"]["concurrencyPolicy"] == "Forbid" and t["type"] == "Python" and t["mode"] == "cluster"
    assert t["driver"]["serviceAccount"] == job_name(group()) and t["arguments"][:2] == ["--namesrv", "ns:9876"]


def test_status_reports_schedule_times_and_the_last_run():
    cron = {"metadata": {"name": "lake-loader-spark", "uid": "c-1"},
            "status": {"lastScheduleTime": "2026-01-01T10:00:00Z", "lastSuccessfulTime": "2026-01-01T09:00:05Z",
                       "active": [{"name": "j3"}]}}

    def job(name, created, **status):
        return {"metadata": {"name": name, "creationTimestamp": created, "ownerReferences": [{"uid": "c-1"}]},
                "status": status}
    ok = job("j1", "2026-01-01T09:00:00Z", conditions=[{"type": "Complete", "status": "True"}],
             startTime="2026-01-01T09:00:00Z", completionTime="2026-01-01T09:00:05Z")
    bad = job("j2", "2026-01-01T10:00:00Z", conditions=[{"type": "Failed", "status": "True",
                                                         "message": "Job has reached the specified backoff limit"}])
    other = {"metadata": {"name": "x", "creationTimestamp": "2027-01-01T00:00:00Z", "ownerReferences": [{"uid": "other"}]}}
    status = spark_job_status(cron, [ok, bad, other])
    assert status["lastScheduleTime"] == "2026-01-01T10:00:00Z" and status["active"] == 1
    assert status["lastRun"] == {"job": "j2", "result": "Failed", "message": "Job has reached the specified backoff limit"}
    assert spark_job_status(cron, [ok])["lastRun"]["result"] == "Succeeded"
    assert spark_job_status(None, []) == {}


def topic(**job) -> dict:
    spark_job = {"schedule": "*/10 * * * *", "input": "s3a://outbox/orders", "checkpoint": "s3a://ckpt/orders", **job}
    return {"apiVersion": "ferrymq.io/v1alpha1", "kind": "Topic",
            "metadata": {"name": "orders", "namespace": "data", "uid": "t-1"},
            "spec": {"brokerRef": {"name": "demo"}, "topicName": "Orders", "sparkJob": spark_job}}


def test_a_topics_job_publishes_new_input_files_to_it():
    sa, role, binding, cron = build_spark_job(
        topic(format="json", keys="CAST(order_id AS STRING)", shardingKey="customer", maxFilesPerBatch=4),
        "demo-namesrv.data.svc:9876")
    args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    app = args.index(PUBLISH_APP)
    assert args[app + 1:] == ["--namesrv", "demo-namesrv.data.svc:9876", "--topic", "Orders",
                              "--input", "s3a://outbox/orders", "--format", "json", "--checkpoint", "s3a://ckpt/orders",
                              "--keys", "CAST(order_id AS STRING)", "--sharding-key", "customer",
                              "--max-files-per-batch", "4"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid", "two runs would share one checkpoint"
    for obj in (sa, role, binding, cron):
        [owner] = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Topic", "orders", "t-1")
    # the application's own parser takes exactly these arguments
    import importlib.util
    spec = importlib.util.spec_from_file_location("publish_to_topic", REPO / "spark-jobs" / "jobs" / "publish_to_topic.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    parsed = job.parse_args(args[app + 1:])
    assert (parsed.topic, parsed.format, parsed.sharding_key, parsed.max_files_per_batch) == ("Orders", "json", "customer", 4)


@pytest.mark.parametrize("job, message", [
    ({"input": ""}, "spec.sparkJob.input is required"),
    ({"checkpoint": None}, "spec.sparkJob.checkpoint is required"),
    ({"format": "avro"}, "spec.sparkJob.format must be one of parquet, json, csv, orc"),
])
def test_bad_publish_job_specs_are_one_clear_error(job, message):
    with pytest.raises(SparkJobSpecError, match=re.escape(message)):
        build_spark_job(topic(**job), "ns:9876")
