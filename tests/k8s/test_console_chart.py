"""The chart's console (console.enabled): lint, what it renders (a read-only Deployment pointed
at the Brokers' name-server Services, a Service, an optional Ingress), the values it refuses,
and server-side validation of the rendered objects."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from ferrymq.cli.main import build_parser
from ferrymq.console.settings import parse_cluster
from tests.k8s.controlplane import REPO, bin_dir
from tests.support import missing_prerequisite

CHART = REPO / "charts" / "ferrymq-operator"
ON = ["--set", "console.enabled=true", "--set", "console.brokers[0].name=demo"]


@pytest.fixture(scope="module")
def helm_bin() -> str:
    """helm alone (built by e2e/controlplane/build.sh): rendering needs no control plane."""
    path = bin_dir() / "helm"
    if not os.access(path, os.X_OK):
        missing_prerequisite(f"helm not built at {path}: run e2e/controlplane/build.sh (make k8s-test does)")
    return str(path)


def helm(helm_bin, *args) -> subprocess.CompletedProcess:
    return subprocess.run([helm_bin, *args], capture_output=True, text=True)


def render(helm_bin, *values, namespace="ferrymq-system") -> dict[tuple[str, str], dict]:
    p = helm(helm_bin, "template", "r", str(CHART), "-n", namespace, *values)
    assert p.returncode == 0, p.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(p.stdout) if d}


def console_container(docs) -> dict:
    return docs[("Deployment", "r-ferrymq-operator-console")]["spec"]["template"]["spec"]["containers"][0]


def test_lint_strict_with_the_console_on(helm_bin):
    values = ON + ["--set", "console.ingress.enabled=true,console.ingress.tlsSecret=console-tls",
                   "--set", "console.credentialsSecret=console-credentials,console.tls=true"]
    p = helm(helm_bin, "lint", "--strict", str(CHART), *values)
    assert p.returncode == 0, p.stdout + p.stderr


def test_off_by_default(helm_bin):
    docs = render(helm_bin)
    assert not [k for k in docs if "console" in k[1]]


def test_a_read_only_console_pointed_at_the_brokers_name_server_services(helm_bin):
    docs = render(helm_bin, *ON, "--set", "console.brokers[1].name=other,console.brokers[1].namespace=team-b",
                  "--set", "watchNamespaces={team-a,team-b}",
                  "--set-json", 'console.extraClusters={"lab":"10.0.0.1:9876;10.0.0.2:9876"}')
    c = console_container(docs)
    args = c["args"]
    assert args[0] == "console" and "--read-only" in args and "--host=0.0.0.0" in args
    clusters = [a.split("=", 1)[1] for a in args if a.startswith("--cluster=")]
    # A Broker's name servers: the operator's <broker>-namesrv Service (port 9876) in its
    # namespace, the first watched one unless named.
    assert [parse_cluster(c) for c in clusters] == [
        parse_cluster("team-a.demo=demo-namesrv.team-a.svc:9876"),
        parse_cluster("team-b.other=other-namesrv.team-b.svc:9876"),
        parse_cluster("lab=10.0.0.1:9876;10.0.0.2:9876")]
    # The real command takes these arguments as they are.
    parsed = build_parser().parse_args(args)
    assert parsed.read_only is True and [s.name for s in parsed.clusters] == ["team-a.demo", "team-b.other", "lab"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and "env" not in c
    assert c["readinessProbe"]["httpGet"]["path"] == "/healthz"
    pod = docs[("Deployment", "r-ferrymq-operator-console")]["spec"]["template"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    service = docs[("Service", "r-ferrymq-operator-console")]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    operator = docs[("Deployment", "r-ferrymq-operator")]["spec"]["selector"]["matchLabels"]
    assert not operator.items() <= pod["metadata"]["labels"].items(), "the operator's selector never matches console pods"
    assert ("Ingress", "r-ferrymq-operator-console") not in docs


def test_without_watched_namespaces_brokers_default_to_the_releases(helm_bin):
    args = console_container(render(helm_bin, *ON, namespace="ops"))["args"]
    assert "--cluster=ops.demo=demo-namesrv.ops.svc:9876" in args


def test_writes_credentials_tls_and_ingress_are_behind_values(helm_bin):
    docs = render(helm_bin, *ON, "--set", "console.readOnly=false,console.credentialsSecret=console-credentials",
                  "--set", "console.tls=true,console.ingress.enabled=true,console.ingress.host=mq.example.org",
                  "--set", "console.ingress.className=nginx,console.ingress.tlsSecret=mq-tls")
    c = console_container(docs)
    assert "--no-read-only" in c["args"] and "--read-only" not in c["args"]
    env = {e["name"]: e for e in c["env"]}
    assert env["FERRYMQ_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "console-credentials", "key": "accessKey"}
    assert env["FERRYMQ_SECRET_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "console-credentials", "key": "secretKey"}
    assert env["FERRYMQ_TLS"]["value"] == "true"
    ingress = docs[("Ingress", "r-ferrymq-operator-console")]["spec"]
    assert ingress["ingressClassName"] == "nginx" and ingress["tls"] == [{"hosts": ["mq.example.org"], "secretName": "mq-tls"}]
    backend = ingress["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert ingress["rules"][0]["host"] == "mq.example.org" and backend == {"name": "r-ferrymq-operator-console",
                                                                           "port": {"name": "http"}}


def test_sign_in_mounts_the_accounts_secret_and_keeps_a_client_on_one_replica(helm_bin):
    docs = render(helm_bin, *ON, "--set", "console.readOnly=false,console.replicas=2",
                  "--set", "console.auth.accountsSecret=console-accounts,console.auth.sessionHours=8",
                  "--set", "console.auth.secureCookies=true",
                  "--set", "console.traceUrl=https://jaeger.example.com/trace/{traceId}",
                  "--set", "console.https.secret=console-tls,console.https.reloadSeconds=10")
    c = console_container(docs)
    parsed = build_parser().parse_args(c["args"])
    assert parsed.accounts == "/etc/ferrymq/console-accounts/accounts.yaml"
    assert parsed.session_hours == 8 and parsed.session_idle_minutes == 60 and parsed.secure_cookies is True
    assert parsed.trace_url == "https://jaeger.example.com/trace/{traceId}"
    assert (parsed.https_cert, parsed.https_key, parsed.https_reload_seconds) == (
        "/etc/ferrymq/console-tls/tls.crt", "/etc/ferrymq/console-tls/tls.key", 10)
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS" and c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert {"name": "tls", "mountPath": "/etc/ferrymq/console-tls", "readOnly": True} in c["volumeMounts"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "accounts")
    assert mount == {"name": "accounts", "mountPath": "/etc/ferrymq/console-accounts", "readOnly": True}
    pod = docs[("Deployment", "r-ferrymq-operator-console")]["spec"]["template"]["spec"]
    assert {"name": "accounts", "secret": {"secretName": "console-accounts"}} in pod["volumes"]
    assert docs[("Service", "r-ferrymq-operator-console")]["spec"]["sessionAffinity"] == "ClientIP"
    # without accounts: no sign-in flags, no mount, no affinity
    plain = render(helm_bin, *ON, "--set", "console.replicas=2")
    c = console_container(plain)
    assert not [a for a in c["args"] if a.startswith(("--accounts", "--session", "--secure"))]
    assert all(m["name"] not in ("accounts", "tls") for m in c["volumeMounts"])
    assert "scheme" not in c["readinessProbe"]["httpGet"]
    assert "sessionAffinity" not in plain[("Service", "r-ferrymq-operator-console")]["spec"]


@pytest.mark.parametrize("values,needle", [
    (["--set", "console.enabled=true"], "console.brokers"),
    (ON + ["--set", "console.brokers[0].namespace=elsewhere", "--set", "watchNamespaces={team-a}"],
     "does not watch"),
    (["--set", "console.enabled=true,console.brokers[0].name=Bad_Name"], "console/brokers/0/name"),
    (ON + ["--set-json", 'console.extraClusters={"lab":"no-port"}'], "extraClusters"),
    (ON + ["--set", "console.unknown=1"], "unknown"),
    (ON + ["--set", "console.auth.sessionHours=0"], "sessionHours"),
    (ON + ["--set", "console.traceUrl=https://jaeger.example.com/no-placeholder"], "traceUrl"),
    (ON + ["--set", "console.auth.password=x"], "password"),
])
def test_values_it_refuses(helm_bin, values, needle):
    p = helm(helm_bin, "template", "r", str(CHART), *values)
    assert p.returncode != 0 and needle in p.stderr, p.stderr


def test_rendered_console_passes_server_side_validation(helm_bin, control_plane):
    docs = render(helm_bin, *ON, "--set", "console.ingress.enabled=true,console.credentialsSecret=cc",
                  namespace="ferrymq-console-render")
    objects = [d for (kind, name), d in docs.items() if name == "r-ferrymq-operator-console"]
    assert sorted(d["kind"] for d in objects) == ["Deployment", "Ingress", "Service"]
    control_plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ferrymq-console-render"}}])
    dry = control_plane.kubectl("apply", "--dry-run=server", "-n", "ferrymq-console-render", "-f", "-",
                                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}), check=False)
    assert dry.returncode == 0 and not dry.stderr.strip(), dry.stderr
