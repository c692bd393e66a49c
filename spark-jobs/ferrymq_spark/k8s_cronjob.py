"""``ConsumerGroup.spec.sparkJob`` and ``Topic.spec.sparkJob`` -> the Kubernetes objects that
run a group's drain into Parquet, or a publish of new input files to a topic, on a schedule.
Pure functions over plain dicts (standard library only, no pyspark), so the
operator can call them and tests can check them without a cluster.

The CronJob's pod runs ``spark-submit`` in *client* mode against the in-cluster API server:
the pod is the driver, executors are pods it creates. Client mode because in cluster mode
spark-submit may exit 0 although the driver failed, and the Job's result must be the drain's.
The pod gets its own ServiceAccount, bound to a Role holding only what a client-mode driver
needs to run executors (pods and the executors' ConfigMap; PVCs only when the Spark
configuration asks for on-demand volumes). Every object is owned by the ConsumerGroup or Topic.

``spec.sparkJob`` fields (all optional unless marked)::

    schedule*            cron schedule ("0 * * * *")
    suspend              true pauses the schedule
    topics*              a ConsumerGroup's: topics to drain (list or comma-separated)
    output*              a ConsumerGroup's: where the Parquet files go (any Hadoop path, e.g. s3a://bucket/orders)
    input*, checkpoint*  a Topic's: the directory of files to publish and where the query keeps which are done
    format, schema       a Topic's: the input's format (parquet, json, csv, orc) and DDL schema
    body, keys, tags, shardingKey, maxFilesPerBatch
                         a Topic's: SQL expressions of the message fields (spark-jobs/jobs/publish_to_topic.py)
    image                the Spark image (spark-jobs/Dockerfile); default DEFAULT_IMAGE
    mainApplicationFile  default local:///opt/ferrymq/jobs/consume_to_parquet.py (a Topic's: publish_to_topic.py)
    arguments            extra arguments for the application
    driver               {cores, memory}
    executor             {instances, cores, memory}
    sparkConf            {key: value} added to (and overriding) the built configuration
    successfulJobsHistoryLimit / failedJobsHistoryLimit / startingDeadlineSeconds / activeDeadlineSeconds
    launcher             SparkSubmit (default) | SparkOperator (a Kubeflow ScheduledSparkApplication)
    credentialsSecret    a Secret with accessKey and secretKey (a User's, for Brokers with ACL on):
                         driver and executors get them as FERRYMQ_ACCESS_KEY/FERRYMQ_SECRET_KEY
                         from the Secret, never in arguments or the Spark configuration's values
"""

from __future__ import annotations

import hashlib
import re
import shlex

API_VERSION = "ferrymq.io/v1alpha1"
DEFAULT_IMAGE = "ferrymq/spark:0.1.0"
DEFAULT_APP = "local:///opt/ferrymq/jobs/consume_to_parquet.py"  # a ConsumerGroup's: drain to Parquet
PUBLISH_APP = "local:///opt/ferrymq/jobs/publish_to_topic.py"  # a Topic's: publish new input files
IN_CLUSTER_MASTER = "k8s://https://kubernetes.default.svc"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DRIVER_PORT, BLOCK_MANAGER_PORT = 7078, 7079
SPARK_UID = 185  # the Spark image's non-root user

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "spark-job"
CREDENTIAL_ENV = (("FERRYMQ_ACCESS_KEY", "accessKey"), ("FERRYMQ_SECRET_KEY", "secretKey"))

# What a client-mode driver does with the API server: create, watch and delete its executor
# pods, and the ConfigMap carrying their Spark configuration.
DRIVER_RULES = [
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["get", "list", "watch", "create", "delete", "deletecollection", "patch"]},
    {"apiGroups": [""], "resources": ["configmaps"],
     "verbs": ["get", "list", "watch", "create", "delete", "deletecollection"]},
]
PVC_RULE = {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
            "verbs": ["get", "list", "watch", "create", "delete", "deletecollection"]}


class SparkJobSpecError(ValueError):
    """spec.sparkJob is missing a field or has a bad value (the message says which)."""


def _dns_name(base: str, suffix: str, limit: int) -> str:
    """``base-suffix`` cut to ``limit`` characters, with a hash to keep cut names distinct."""
    name = f"{base}-{suffix}".lower()
    name = re.sub(r"[^a-z0-9-]", "-", name).strip("-")
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:limit - 9].rstrip('-')}-{digest}"


def job_name(group: dict) -> str:
    """CronJob, ServiceAccount, Role and RoleBinding name. 52 characters at most: the CronJob
    controller appends 11 to name its Jobs, which must stay valid label values (63)."""
    return _dns_name(group["metadata"]["name"], "spark", 52)


def group_name(group: dict) -> str:
    return group.get("spec", {}).get("groupName") or group["metadata"]["name"]


def labels(group: dict) -> dict[str, str]:
    return {LABEL_NAME: "ferrymq", LABEL_INSTANCE: group["metadata"]["name"], LABEL_COMPONENT: COMPONENT,
            LABEL_MANAGED_BY: "ferrymq-operator", LABEL_PART_OF: "ferrymq"}


def owner_reference(group: dict) -> dict:
    meta = group["metadata"]
    return {"apiVersion": group.get("apiVersion", API_VERSION), "kind": group.get("kind") or "ConsumerGroup",
            "name": meta["name"], "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def _meta(group: dict, name: str) -> dict:
    meta = {"name": name, "namespace": group["metadata"]["namespace"], "labels": labels(group)}
    if group["metadata"].get("uid"):
        meta["ownerReferences"] = [owner_reference(group)]
    return meta


def is_topic(owner: dict) -> bool:
    """A Topic's job publishes to it; a ConsumerGroup's drains the group."""
    return owner.get("kind") == "Topic"


def topic_name(owner: dict) -> str:
    return owner.get("spec", {}).get("topicName") or owner["metadata"]["name"]


_REQUIRED = {False: ("schedule", "topics", "output"), True: ("schedule", "input", "checkpoint")}
_INPUT_FORMATS = ("parquet", "json", "csv", "orc")
# A Topic's optional spec.sparkJob fields and publish_to_topic.py's flag for each.
PUBLISH_FLAGS = (("schema", "--schema"), ("body", "--body"), ("keys", "--keys"), ("tags", "--tags"),
                 ("shardingKey", "--sharding-key"), ("maxFilesPerBatch", "--max-files-per-batch"))
# The fields only one kind's job has (the rest are common).
TOPIC_ONLY = frozenset({"input", "checkpoint", "format", *(f for f, _ in PUBLISH_FLAGS)})
GROUP_ONLY = frozenset({"topics", "output"})


def spark_job_spec(group: dict) -> dict:
    """spec.sparkJob checked, with defaults filled in (``group``: the ConsumerGroup or Topic)."""
    job = dict(group.get("spec", {}).get("sparkJob") or {})
    if not job:
        raise SparkJobSpecError("spec.sparkJob is not set")
    for required in _REQUIRED[is_topic(group)]:
        if not job.get(required):
            raise SparkJobSpecError(f"spec.sparkJob.{required} is required")
    topics = job.get("topics") or []
    topics = [t.strip() for t in (topics.split(",") if isinstance(topics, str) else topics) if str(t).strip()]
    if not is_topic(group) and not topics:
        raise SparkJobSpecError("spec.sparkJob.topics names no topic")
    if is_topic(group) and job.get("format", "parquet") not in _INPUT_FORMATS:
        raise SparkJobSpecError(f"spec.sparkJob.format must be one of {', '.join(_INPUT_FORMATS)}, "
                                f"not {job.get('format')!r}")
    if len(str(job["schedule"]).split()) not in (5, 6) and not str(job["schedule"]).startswith("@"):
        raise SparkJobSpecError(f"spec.sparkJob.schedule {job['schedule']!r} is not a cron schedule")
    launcher = job.get("launcher", "SparkSubmit")
    if launcher not in ("SparkSubmit", "SparkOperator"):
        raise SparkJobSpecError(f"spec.sparkJob.launcher must be SparkSubmit or SparkOperator, not {launcher!r}")
    executor = {"instances": 2, "cores": 1, "memory": "1g", **(job.get("executor") or {})}
    driver = {"cores": 1, "memory": "1g", **(job.get("driver") or {})}
    if int(executor["instances"]) < 1:
        raise SparkJobSpecError("spec.sparkJob.executor.instances must be at least 1")
    arguments = job.get("arguments") or []
    if isinstance(arguments, str):
        arguments = shlex.split(arguments)
    return {**job, "topics": topics, "launcher": launcher, "executor": executor, "driver": driver,
            "image": job.get("image") or DEFAULT_IMAGE,
            "mainApplicationFile": job.get("mainApplicationFile") or (PUBLISH_APP if is_topic(group) else DEFAULT_APP),
            "arguments": [str(a) for a in arguments], "sparkConf": {str(k): str(v) for k, v in (job.get("sparkConf") or {}).items()},
            "suspend": bool(job.get("suspend", False))}


def application_arguments(group: dict, job: dict, namesrv_addr: str) -> list[str]:
    """Arguments of the application: the drain's or the publish job's own unless
    mainApplicationFile was changed."""
    if job["mainApplicationFile"] not in (DEFAULT_APP, PUBLISH_APP):
        return list(job["arguments"])
    if job["mainApplicationFile"] == PUBLISH_APP:
        args = ["--namesrv", namesrv_addr, "--topic", topic_name(group), "--input", str(job["input"]),
                "--format", str(job.get("format", "parquet")), "--checkpoint", str(job["checkpoint"])]
        for field, flag in PUBLISH_FLAGS:
            if job.get(field) not in (None, ""):
                args += [flag, str(job[field])]
        return args + list(job["arguments"])
    return ["--namesrv", namesrv_addr, "--group", group_name(group), "--topics", ",".join(job["topics"]),
            "--output", str(job["output"]), *job["arguments"]]


def spark_conf(group: dict, job: dict) -> dict[str, str]:
    """The ``--conf`` settings; spark.kubernetes.* ones are those Spark documents for client mode."""
    ns = group["metadata"]["namespace"]
    name = job_name(group)
    conf = {
        "spark.app.name": name,
        "spark.kubernetes.namespace": ns,
        "spark.kubernetes.container.image": job["image"],
        "spark.kubernetes.container.image.pullPolicy": job.get("imagePullPolicy", "IfNotPresent"),
        # Client mode inside a pod: authenticate with the pod's own ServiceAccount token...
        "spark.kubernetes.authenticate.caCertFile": f"{SA_DIR}/ca.crt",
        "spark.kubernetes.authenticate.oauthTokenFile": f"{SA_DIR}/token",
        # ...make the driver pod the executors' owner (they go when it goes)...
        "spark.kubernetes.driver.pod.name": "$(POD_NAME)",
        "spark.kubernetes.executor.podNamePrefix": name,
        # ...and let executors reach the driver at its pod IP on fixed ports. Bind to the pod IP
        # too, not 0.0.0.0: Spark >= 4.1 hands executors the bind address as the driver's
        # address on Kubernetes (spark.kubernetes.executor.useDriverPodIP, on by default).
        "spark.driver.host": "$(POD_IP)",
        "spark.driver.bindAddress": "$(POD_IP)",
        "spark.driver.port": str(DRIVER_PORT),
        "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
        "spark.executor.instances": str(job["executor"]["instances"]),
        "spark.executor.cores": str(job["executor"]["cores"]),
        "spark.executor.memory": str(job["executor"]["memory"]),
        "spark.kubernetes.executor.request.cores": str(job["executor"]["cores"]),
        "spark.kubernetes.executor.limit.cores": str(job["executor"]["cores"]),
        "spark.driver.memory": str(job["driver"]["memory"]),
        "spark.sql.session.timeZone": "UTC",
    }
    secret = job.get("credentialsSecret")
    if secret:  # executors: env from the Secret (Spark's secretKeyRef); the driver pod gets its own
        for env, key in CREDENTIAL_ENV:
            conf[f"spark.kubernetes.executor.secretKeyRef.{env}"] = f"{secret}:{key}"
            if job["launcher"] == "SparkOperator":
                conf[f"spark.kubernetes.driver.secretKeyRef.{env}"] = f"{secret}:{key}"
    for key, value in labels(group).items():
        conf[f"spark.kubernetes.executor.label.{key}"] = value
    conf.update(job["sparkConf"])
    return conf


def spark_submit_args(group: dict, job: dict, namesrv_addr: str) -> list[str]:
    args = ["--master", IN_CLUSTER_MASTER, "--deploy-mode", "client", "--name", job_name(group)]
    for key, value in spark_conf(group, job).items():
        args += ["--conf", f"{key}={value}"]
    return args + [job["mainApplicationFile"], *application_arguments(group, job, namesrv_addr)]


def _memory_quantity(spark_memory: str) -> str:
    """Spark's 1g / 512m -> a Kubernetes quantity with the overhead Spark adds for non-JVM memory."""
    m = re.fullmatch(r"(\d+)([kmgt]?)b?", str(spark_memory).strip().lower())
    if not m:
        raise SparkJobSpecError(f"memory {spark_memory!r} is not a Spark size like 512m or 2g")
    mib = int(m.group(1)) * {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024, "": 1 / (1024 * 1024)}[m.group(2)]
    return f"{int(mib + max(384, mib * 0.4))}Mi"  # 0.4: Spark's overhead factor for non-JVM (Python) jobs


def needs_pvcs(job: dict) -> bool:
    return any("persistentVolumeClaim" in k and v == "OnDemand" for k, v in job["sparkConf"].items())


def rbac(group: dict, job: dict) -> list[dict]:
    name = job_name(group)
    rules = DRIVER_RULES + ([PVC_RULE] if needs_pvcs(job) else [])
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(group, name)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(group, name), "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(group, name),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": group["metadata"]["namespace"]}]},
    ]


DRIVER_VOLUME_KEY = re.compile(r"spark\.kubernetes\.driver\.volumes\.(persistentVolumeClaim|emptyDir|hostPath)"
                               r"\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(mount\.path|mount\.readOnly|mount\.subPath|options\.\w+)")


def driver_volumes(job: dict) -> tuple[list[dict], list[dict]]:
    """Pod volumes and mounts for the driver from ``spark.kubernetes.driver.volumes.*``.

    Spark applies those keys to the driver pod it creates in cluster mode. Here the driver *is*
    the CronJob's pod (client mode), so the builder mounts them there, with Spark's meaning:
    ``...persistentVolumeClaim.out.options.claimName=drain-output`` and
    ``...persistentVolumeClaim.out.mount.path=/output`` mount that claim at /output. Executors
    get the same volume from the matching ``spark.kubernetes.executor.volumes.*`` keys (Spark
    itself reads those), so a Parquet output on a shared claim is seen by both.
    """
    found: dict[str, dict] = {}
    for key, value in job["sparkConf"].items():
        m = DRIVER_VOLUME_KEY.fullmatch(key)
        if m:
            found.setdefault(m.group(2), {"type": m.group(1)})[m.group(4)] = value
    volumes, mounts = [], []
    for name, v in sorted(found.items()):
        if "mount.path" not in v:
            raise SparkJobSpecError(f"spark.kubernetes.driver.volumes.{v['type']}.{name}.mount.path is required")
        if v["type"] == "persistentVolumeClaim":
            claim = v.get("options.claimName")
            if not claim or claim == "OnDemand":
                raise SparkJobSpecError(f"driver volume {name}: options.claimName must name an existing claim "
                                        "(OnDemand claims exist only for executors)")
            source = {"persistentVolumeClaim": {"claimName": claim}}
        elif v["type"] == "emptyDir":
            source = {"emptyDir": {k: v[f"options.{k}"] for k in ("medium", "sizeLimit") if f"options.{k}" in v}}
        else:
            source = {"hostPath": {"path": v.get("options.path", ""), **({"type": v["options.type"]} if "options.type" in v else {})}}
        volumes.append({"name": name, **source})
        mount = {"name": name, "mountPath": v["mount.path"], "readOnly": str(v.get("mount.readOnly", "false")).lower() == "true"}
        if v.get("mount.subPath"):
            mount["subPath"] = v["mount.subPath"]
        mounts.append(mount)
    return volumes, mounts


def cron_job(group: dict, job: dict, namesrv_addr: str) -> dict:
    name = job_name(group)
    volumes, mounts = driver_volumes(job)
    memory = _memory_quantity(job["driver"]["memory"])
    cores = str(job["driver"]["cores"])
    container = {
        "name": "spark-submit",
        "image": job["image"],
        "imagePullPolicy": job.get("imagePullPolicy", "IfNotPresent"),
        "command": ["spark-submit"],
        "args": spark_submit_args(group, job, namesrv_addr),
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NAMESRV_ADDR", "value": namesrv_addr},
            *({"name": env, "valueFrom": {"secretKeyRef": {"name": job["credentialsSecret"], "key": key}}}
              for env, key in (CREDENTIAL_ENV if job.get("credentialsSecret") else ())),
        ],
        "ports": [{"name": "driver", "containerPort": DRIVER_PORT}, {"name": "blockmanager", "containerPort": BLOCK_MANAGER_PORT}],
        "resources": {"requests": {"cpu": cores, "memory": memory}, "limits": {"cpu": cores, "memory": memory}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if mounts:
        container["volumeMounts"] = mounts
    pod_labels = {**labels(group), "ferrymq.io/spark-role": "driver"}
    spec = {
        "schedule": job["schedule"],
        "suspend": job["suspend"],
        "concurrencyPolicy": "Forbid",  # two runs at once would race on the group's offsets or the publish checkpoint
        "successfulJobsHistoryLimit": int(job.get("successfulJobsHistoryLimit", 3)),
        "failedJobsHistoryLimit": int(job.get("failedJobsHistoryLimit", 3)),
        "jobTemplate": {
            "metadata": {"labels": labels(group)},
            "spec": {
                "backoffLimit": 0,  # a failed drain is retried by the next schedule; re-runs are idempotent
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "serviceAccountName": name,
                        "automountServiceAccountToken": True,
                        "restartPolicy": "Never",
                        "securityContext": {"runAsNonRoot": True, "runAsUser": SPARK_UID, "runAsGroup": SPARK_UID,
                                            "fsGroup": SPARK_UID, "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [container],
                        **({"volumes": volumes} if volumes else {}),
                    },
                },
            },
        },
    }
    if "startingDeadlineSeconds" in job:
        spec["startingDeadlineSeconds"] = int(job["startingDeadlineSeconds"])
    if "activeDeadlineSeconds" in job:
        spec["jobTemplate"]["spec"]["activeDeadlineSeconds"] = int(job["activeDeadlineSeconds"])
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": _meta(group, name), "spec": spec}


def scheduled_spark_application(group: dict, job: dict, namesrv_addr: str) -> dict:
    """The same drain as a Kubeflow Spark Operator ScheduledSparkApplication (launcher:
    SparkOperator); the Spark Operator runs it in cluster mode and tracks the driver's result."""
    name = job_name(group)
    conf = {k: v for k, v in spark_conf(group, job).items()
            if not k.startswith(("spark.kubernetes.authenticate.", "spark.kubernetes.driver.pod.name", "spark.driver.host",
                                 "spark.driver.bindAddress", "spark.executor.", "spark.driver.memory"))}
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "ScheduledSparkApplication", "metadata": _meta(group, name),
        "spec": {
            "schedule": job["schedule"], "suspend": job["suspend"], "concurrencyPolicy": "Forbid",
            "successfulRunHistoryLimit": int(job.get("successfulJobsHistoryLimit", 3)),
            "failedRunHistoryLimit": int(job.get("failedJobsHistoryLimit", 3)),
            "template": {
                "type": "Python", "mode": "cluster", "image": job["image"], "sparkVersion": job.get("sparkVersion", "4.0.0"),
                "mainApplicationFile": job["mainApplicationFile"],
                "arguments": application_arguments(group, job, namesrv_addr),
                "sparkConf": conf, "restartPolicy": {"type": "Never"},
                "driver": {"cores": int(job["driver"]["cores"]), "memory": str(job["driver"]["memory"]),
                           "serviceAccount": name, "labels": labels(group)},
                "executor": {"instances": int(job["executor"]["instances"]), "cores": int(job["executor"]["cores"]),
                             "memory": str(job["executor"]["memory"]), "labels": labels(group)},
            },
        },
    }


def build_spark_job(group: dict, namesrv_addr: str) -> list[dict]:
    """Everything to apply for a ConsumerGroup's spec.sparkJob, in apply order."""
    job = spark_job_spec(group)
    if job["launcher"] == "SparkOperator":
        return [*rbac(group, job), scheduled_spark_application(group, job, namesrv_addr)]
    return [*rbac(group, job), cron_job(group, job, namesrv_addr)]


def spark_job_status(cronjob: dict | None, jobs: list[dict]) -> dict:
    """status.sparkJob of the ConsumerGroup from its CronJob and the Jobs it created."""
    if cronjob is None:
        return {}
    st = cronjob.get("status") or {}
    out = {"cronJob": cronjob["metadata"]["name"], "active": len(st.get("active") or [])}
    for key in ("lastScheduleTime", "lastSuccessfulTime"):
        if st.get(key):
            out[key] = st[key]
    uid = cronjob["metadata"].get("uid")
    mine = [j for j in jobs if not uid or any(o.get("uid") == uid for o in j["metadata"].get("ownerReferences", []))]
    if mine:
        last = max(mine, key=lambda j: (j["metadata"].get("creationTimestamp", ""), j["metadata"]["name"]))
        out["lastRun"] = _run_result(last)
    return out


def _run_result(job: dict) -> dict:
    st = job.get("status") or {}
    conditions = {c["type"]: c for c in st.get("conditions") or [] if c.get("status") == "True"}
    if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
        result, cond = "Succeeded", conditions.get("Complete") or conditions.get("SuccessCriteriaMet")
    elif "Failed" in conditions or "FailureTarget" in conditions:
        result, cond = "Failed", conditions.get("Failed") or conditions.get("FailureTarget")
    else:
        result, cond = "Running", None
    out = {"job": job["metadata"]["name"], "result": result}
    for key in ("startTime", "completionTime"):
        if st.get(key):
            out[key] = st[key]
    if cond and cond.get("message"):
        out["message"] = cond["message"]
    return out
