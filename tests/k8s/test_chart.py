"""The Helm chart: lint, render, server-side validation, and a real `helm install`."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from ferrymq_operator.manifests import CONTROLLER_RULES
from ferrymq_spark.k8s_cronjob import DRIVER_RULES
from tests.k8s.conftest import RELEASE_NS, SA
from tests.k8s.controlplane import REPO

CHART = REPO / "charts" / "ferrymq-operator"


def helm(control_plane, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(control_plane.bin / "helm"), *args], capture_output=True, text=True)


def test_helm_lint_strict(control_plane):
    p = helm(control_plane, "lint", "--strict", str(CHART))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in p.stdout


@pytest.mark.parametrize("values", [[], ["--set", "watchNamespaces={team-a,team-b}"],
                                    ["--set", "serviceAccount.create=false,rbac.create=false"],
                                    ["--set-json", 'namesrvOverrides={"ns/b":"10.1.1.1:9876"}']])
def test_rendered_manifests_pass_server_side_validation(control_plane, values):
    p = helm(control_plane, "template", "r", str(CHART), "-n", "ferrymq-render", *values)
    assert p.returncode == 0, p.stderr
    docs = [d for d in yaml.safe_load_all(p.stdout) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert "Deployment" in kinds and kinds.count("CustomResourceDefinition") == 4
    # The CRDs: installed and upgraded for real (helm_release, tests/k8s/test_chart_crds.py);
    # a client-side dry-run apply over the ones the session's release owns would only warn about
    # kubectl's last-applied annotation.
    docs = [d for d in docs if d["kind"] != "CustomResourceDefinition"]
    control_plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                         for n in ("ferrymq-render", "team-a", "team-b")])
    dry = control_plane.kubectl("apply", "--dry-run=server", "-f", "-",
                                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}), check=False)
    assert dry.returncode == 0 and not dry.stderr.strip(), dry.stderr
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    # two replicas by default, one leading by a Lease: standbys are replaced first on an update
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e for e in c["env"]}
    assert env["FERRYMQ_LEADER_ELECTION"]["value"] == "true" and env["FERRYMQ_LEASE_NAME"]["value"] == "r-ferrymq-operator"
    assert [env[k]["value"] for k in ("FERRYMQ_LEASE_DURATION_SECONDS", "FERRYMQ_LEASE_RENEW_DEADLINE_SECONDS",
                                      "FERRYMQ_LEASE_RETRY_PERIOD_SECONDS")] == ["15", "10", "2"]
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    pdb = next(d for d in docs if d["kind"] == "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": deployment["spec"]["selector"]["matchLabels"]}}
    if "rbac.create=false" not in " ".join(values):
        lease_role = next(d for d in docs if d["kind"] == "Role"
                          and d["metadata"]["name"] == "r-ferrymq-operator-leader-election")
        assert lease_role["metadata"]["namespace"] == "ferrymq-render"
        assert lease_role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                        "verbs": ["get", "create", "update"]}]
        assert any(d["kind"] == "RoleBinding" and d["roleRef"]["name"] == "r-ferrymq-operator-leader-election"
                   for d in docs)
    if "watchNamespaces" in " ".join(values):
        roles = [d for d in docs if d["kind"] == "Role" and not d["metadata"]["name"].endswith("-leader-election")]
        assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
        assert not any(d["kind"] == "ClusterRole" and d["metadata"]["name"] == "r-ferrymq-operator" for d in docs)


def test_one_replica_without_leader_election_is_the_old_single_operator(control_plane):
    p = helm(control_plane, "template", "r", str(CHART), "--set", "replicas=1,leaderElection.enabled=false")
    assert p.returncode == 0, p.stderr
    docs = [d for d in yaml.safe_load_all(p.stdout) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    env = {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "FERRYMQ_LEADER_ELECTION" not in env
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget" or d["metadata"]["name"].endswith("-leader-election")]
    # two operators without an election would both act: refused
    p = helm(control_plane, "template", "r", str(CHART), "--set", "replicas=2,leaderElection.enabled=false")
    assert p.returncode != 0 and "needs leaderElection.enabled" in p.stderr


def test_resync_lines_are_logged_only_when_asked(control_plane):
    def operator_env(*values: str) -> dict:
        p = helm(control_plane, "template", "r", str(CHART), *values)
        assert p.returncode == 0, p.stderr
        deployment = next(d for d in yaml.safe_load_all(p.stdout) if d and d["kind"] == "Deployment")
        return {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "FERRYMQ_LOG_RESYNCS" not in operator_env()
    assert operator_env("--set", "logResyncs=true")["FERRYMQ_LOG_RESYNCS"] == "true"
    p = helm(control_plane, "template", "r", str(CHART), "--set", "logResyncs=loud")
    assert p.returncode != 0 and "logResyncs" in p.stderr


def test_values_schema_rejects_bad_values(control_plane):
    p = helm(control_plane, "template", "r", str(CHART), "--set", "watchNamespaces={Bad_Name}")
    assert p.returncode != 0 and "watchNamespaces" in p.stderr
    p = helm(control_plane, "template", "r", str(CHART), "--set", "unknownKey=1")
    assert p.returncode != 0 and "unknownKey" in p.stderr


def test_helm_install_succeeded(control_plane, helm_release):
    status = json.loads(control_plane.helm("status", helm_release, "-n", RELEASE_NS, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    dep = control_plane.get("deployment", "ferrymq-ferrymq-operator", RELEASE_NS)
    assert dep["status"].get("availableReplicas") == 2
    # the PDB and the Role of the leader election, as installed
    pdb = control_plane.get("poddisruptionbudget", "ferrymq-ferrymq-operator", RELEASE_NS)
    assert pdb["spec"]["minAvailable"] == 1
    assert control_plane.get("role", "ferrymq-ferrymq-operator-leader-election", RELEASE_NS)
    # preferred anti-affinity: on the three kwok nodes the replicas run on different nodes
    pods = control_plane.get("pods", None, RELEASE_NS)["items"]
    nodes = [p["spec"].get("nodeName") for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/name") == "ferrymq-operator"]
    assert len(nodes) == 2 and len(set(nodes)) == 2, nodes
    assert control_plane.get("serviceaccount", SA, RELEASE_NS)
    for crd in ("brokers.ferrymq.io", "topics.ferrymq.io", "consumergroups.ferrymq.io", "users.ferrymq.io"):
        obj = control_plane.get("crd", crd)
        assert any(c["type"] == "Established" and c["status"] == "True" for c in obj["status"]["conditions"])
        # rendered by the release (templates/crds.yaml), so `helm upgrade` upgrades them; kept by uninstall
        annotations = obj["metadata"]["annotations"]
        assert annotations["meta.helm.sh/release-name"] == helm_release and annotations["helm.sh/resource-policy"] == "keep"


def test_chart_rbac_is_least_privilege(control_plane, helm_release):
    """What the operator's ServiceAccount may and may not do, asked of the real authorizer."""
    def can(verb, resource, ns="default"):
        # "kind/x" would be read as the object named x: subresources go in --subresource
        resource, _, sub = resource.partition("/")
        p = control_plane.kubectl("auth", "can-i", verb, resource, "-n", ns, *([f"--subresource={sub}"] if sub else []),
                                  f"--as=system:serviceaccount:{RELEASE_NS}:{SA}", check=False)
        return p.stdout.strip() == "yes"
    assert can("patch", "brokers.ferrymq.io") and can("patch", "topics.ferrymq.io/status")
    assert not can("update", "namespaces/finalizers")
    assert can("create", "statefulsets.apps") and can("delete", "pods") and can("create", "events")
    # blockOwnerDeletion on owned objects (OwnerReferencesPermissionEnforcement is on in the control plane)
    assert can("update", "brokers.ferrymq.io/finalizers") and can("update", "consumergroups.ferrymq.io/finalizers")
    assert can("update", "topics.ferrymq.io/finalizers")  # a Topic owns its publish job's objects
    # Owned objects go away through garbage collection with their Broker; the one exception is
    # a slave set (StatefulSet, Service, PDB) a lowered spec.replication.slavesPerGroup retires.
    assert can("delete", "statefulsets.apps") and can("delete", "poddisruptionbudgets.policy")
    assert not can("deletecollection", "statefulsets.apps") and not can("delete", "deployments.apps")
    assert not can("delete", "persistentvolumeclaims")
    # Users: credentials and the brokers' ACL in Secrets it creates; it never deletes one (owned
    # Secrets go with their User or Broker) and never watches them.
    assert can("get", "secrets") and can("create", "secrets") and can("patch", "secrets")
    assert not can("delete", "secrets") and not can("watch", "secrets")
    assert can("patch", "users.ferrymq.io/status") and can("update", "users.ferrymq.io/finalizers")
    assert not can("create", "clusterroles.rbac.authorization.k8s.io", ns="")
    # ConsumerGroup.spec.sparkJob: the CronJob and its RBAC objects, the runs read only.
    for resource in ("cronjobs.batch", "serviceaccounts", "roles.rbac.authorization.k8s.io",
                     "rolebindings.rbac.authorization.k8s.io"):
        assert can("create", resource) and can("patch", resource) and can("delete", resource), resource
    assert can("list", "jobs.batch") and not can("create", "jobs.batch") and not can("delete", "jobs.batch")
    # It may grant the Spark driver's Role only what it holds itself: it holds exactly those
    # rights, and cannot escalate or bind beyond them.
    for rule in DRIVER_RULES:
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                assert can(verb, resource), f"{verb} {resource}: granted by the Spark driver's Role"
    assert not can("escalate", "roles.rbac.authorization.k8s.io") and not can("bind", "roles.rbac.authorization.k8s.io")
    assert not can("bind", "clusterroles.rbac.authorization.k8s.io") and not can("impersonate", "serviceaccounts")
    assert not can("create", "persistentvolumeclaims"), "on-demand executor volumes are off by default (rbac.sparkJobVolumes)"
    # a raised Broker storage.size: claims expanded (patch), their StorageClass read
    assert can("patch", "persistentvolumeclaims") and can("get", "storageclasses.storage.k8s.io", ns="")
    assert not can("patch", "storageclasses.storage.k8s.io", ns="")
    # leader election: its Lease in the release's namespace
    for verb in ("get", "create", "update"):
        assert can(verb, "leases.coordination.k8s.io", ns=RELEASE_NS)
    # the failover controllers' ServiceAccount, Role and RoleBinding: the operator holds what
    # that Role grants (it may grant nothing else), with or without Spark jobs
    for rule in CONTROLLER_RULES:
        for resource in rule["resources"]:
            group = rule["apiGroups"][0]
            for verb in rule["verbs"]:
                assert can(verb, f"{resource}.{group}" if group else resource), f"{verb} {resource}: the controllers' Role"
    assert not can("create", "serviceaccounts/token") and not can("create", "clusterrolebindings.rbac.authorization.k8s.io")


@pytest.mark.parametrize("values,present,absent", [
    (["--set", "rbac.sparkJobs=false"], {("", "serviceaccounts"), ("rbac.authorization.k8s.io", "roles")},
     {("batch", "cronjobs")}),
    (["--set", "rbac.sparkJobVolumes=true"], {("batch", "cronjobs"), ("", "persistentvolumeclaims")}, set()),
])
def test_spark_job_rbac_values(control_plane, values, present, absent):
    p = helm(control_plane, "template", "r", str(CHART), *values)
    assert p.returncode == 0, p.stderr
    role = next(d for d in yaml.safe_load_all(p.stdout) if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "r-ferrymq-operator")
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert present <= granted and not (absent & granted)
    pods = {v for rule in role["rules"] if rule["resources"] == ["pods"] for v in rule["verbs"]}
    assert ("create" in pods) == ("rbac.sparkJobs=false" not in values[1])
    claims = {v for rule in role["rules"] if rule["resources"] == ["persistentvolumeclaims"] for v in rule["verbs"]}
    assert ("create" in claims) == ("rbac.sparkJobVolumes=true" in values[1])
    # the failover controllers' Role can always be granted
    granted_verbs = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                     for v in rule["verbs"]}
    for rule in CONTROLLER_RULES:
        for verb in rule["verbs"]:
            assert (rule["apiGroups"][0], rule["resources"][0], verb) in granted_verbs


def test_the_operator_may_create_the_failover_controllers_role_and_binding(control_plane, helm_release):
    """RBAC escalation prevention on the real authorizer: the operator's ServiceAccount creates
    the controllers' Role (it holds every right in it) and binds it."""
    from ferrymq_operator import manifests
    from ferrymq_operator.model import BrokerCluster

    cluster = BrokerCluster.from_resource({"metadata": {"name": "esc", "namespace": "default"},
                                           "spec": {"replicas": 1, "replication": {"slavesPerGroup": 1, "failover": True}}})
    for obj in (manifests.controller_service_account(cluster), manifests.controller_role(cluster),
                manifests.controller_role_binding(cluster)):
        p = control_plane.kubectl("create", "-n", "default", "-f", "-", f"--as=system:serviceaccount:{RELEASE_NS}:{SA}",
                                  input=json.dumps(obj), check=False)
        assert p.returncode == 0, p.stderr
    for kind in ("rolebinding", "role", "serviceaccount"):
        control_plane.kubectl("delete", kind, "esc-controller", "-n", "default")
    # and it could not grant more than it holds
    wider = manifests.controller_role(cluster)
    wider["metadata"]["name"] = "esc-wider"
    wider["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["delete"]})
    p = control_plane.kubectl("create", "--dry-run=server", "-n", "default", "-f", "-",
                              f"--as=system:serviceaccount:{RELEASE_NS}:{SA}", input=json.dumps(wider), check=False)
    assert p.returncode != 0 and "attempting to grant RBAC permissions not currently held" in p.stderr, p.stderr


def test_owner_references_the_operator_sets_pass_owner_reference_enforcement(control_plane, helm_release):
    """blockOwnerDeletion needs update on the owner's finalizers (OwnerReferencesPermissionEnforcement,
    on in the local control plane): the chart grants it for Brokers, Topics, ConsumerGroups and
    Users, the owners of everything the operator creates, and for nothing else."""
    def create_owned_by(kind: str, api_version: str = "ferrymq.io/v1alpha1") -> subprocess.CompletedProcess:
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"owned-by-{kind.lower()}", "ownerReferences": [
            {"apiVersion": api_version, "kind": kind, "name": "x", "uid": "00000000-0000-0000-0000-000000000001",
             "controller": True, "blockOwnerDeletion": True}]}}
        return control_plane.kubectl("create", "--dry-run=server", "-n", "default", "-f", "-",
                                     f"--as=system:serviceaccount:{RELEASE_NS}:{SA}", input=json.dumps(cm), check=False)
    for kind in ("Broker", "Topic", "ConsumerGroup", "User"):
        p = create_owned_by(kind)
        assert p.returncode == 0, p.stderr
    p = create_owned_by("Namespace", "v1")
    assert p.returncode != 0 and "cannot set blockOwnerDeletion" in p.stderr, p.stderr


def test_monitoring_renders_pod_monitors_rules_and_the_dashboard(control_plane):
    values = ["--set", "monitoring.podMonitors=true,monitoring.rules=true,monitoring.dashboards=true",
              "--set", "monitoring.alerts.lagMessages=5000", "--set", "monitoring.labels.release=prom",
              "--set", "watchNamespaces={team-a}"]
    p = helm(control_plane, "lint", "--strict", str(CHART), *values)
    assert p.returncode == 0, p.stdout + p.stderr
    p = helm(control_plane, "template", "r", str(CHART), "-n", "ferrymq-render", *values)
    assert p.returncode == 0, p.stderr
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(p.stdout) if d}
    brokers = docs[("PodMonitor", "r-ferrymq-operator-brokers")]
    assert brokers["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "ferrymq",
                                                          "app.kubernetes.io/component": "broker"}
    assert brokers["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}
    assert brokers["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    assert brokers["metadata"]["labels"]["release"] == "prom"
    assert ("PodMonitor", "r-ferrymq-operator-namesrvs") in docs
    rules = {r["alert"]: r for r in docs[("PrometheusRule", "r-ferrymq-operator")]["spec"]["groups"][0]["rules"]}
    assert {"FerryMQBrokerDown", "FerryMQConsumerLagGrowing", "FerryMQGroupDisabledByProtection",
            "FerryMQDiskNearlyFull", "FerryMQFlushLatencyHigh"} <= set(rules)
    assert "> 5000" in rules["FerryMQConsumerLagGrowing"]["expr"]
    assert "{{ $labels.group }}" in rules["FerryMQGroupDisabledByProtection"]["annotations"]["summary"]
    dashboards = docs[("ConfigMap", "r-ferrymq-operator-dashboards")]
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboards["data"]["ferrymq.json"]) == json.loads((CHART / "dashboards" / "ferrymq.json").read_text())
    # all four pass the real API server's validation, the Prometheus operator's kinds against its
    # own CRDs (from its Go module, fetched by e2e/controlplane/build.sh)
    crds = control_plane.bin.parent / "prometheus-operator-crds.yaml"
    control_plane.kubectl("apply", "--server-side", "-f", str(crds))
    for crd in ("podmonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"):
        control_plane.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    control_plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                         for n in ("ferrymq-render", "team-a")])
    monitoring = [d for (kind, _), d in docs.items() if kind in ("PodMonitor", "PrometheusRule", "ConfigMap")]
    assert len(monitoring) == 4
    dry = control_plane.kubectl("apply", "--dry-run=server", "-n", "ferrymq-render", "-f", "-",
                                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": monitoring}), check=False)
    assert dry.returncode == 0 and not dry.stderr.strip(), dry.stderr
    off = helm(control_plane, "template", "r", str(CHART))
    assert "PodMonitor" not in off.stdout and "PrometheusRule" not in off.stdout and "grafana_dashboard" not in off.stdout
