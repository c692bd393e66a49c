"""Users on a real API server: the credentials Secret, the Broker's ACL Secret, a client of
a real ACL-enforcing FerryMQ broker admitted and then refused once the User is gone, TLS
Secrets mounted, and invalid Users rejected by the API server."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
import yaml

from ferrymq.acl.signature import Credentials
from ferrymq.client.config import ClientConfig
from ferrymq.client.errors import MQBrokerError
from ferrymq.client.producer import Producer
from ferrymq.common.message import Message
from tests.k8s.conftest import CLUSTER
from tests.k8s.test_operator import API, broker_cr, condition, wait_status
from testkit.ports import free_port
from testkit.processes import FerryProcess
from testkit.wait import poll_until


def user_cr(name: str, **spec) -> dict:
    return {"apiVersion": API, "kind": "User", "metadata": {"name": name},
            "spec": {"brokerRef": {"name": CLUSTER}, **spec}}


def secret_data(cp, name: str, ns: str) -> dict[str, str]:
    secret = cp.get("secret", name, ns) or {}
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def acl_accounts(cp, ns: str) -> dict[str, dict]:
    text = secret_data(cp, f"{CLUSTER}-acl", ns).get("plain_acl.yml")
    return {a["accessKey"]: a for a in (yaml.safe_load(text) or {}).get("accounts", [])} if text else {}


@pytest.fixture
def acl_broker(tmp_path):
    """A real FerryMQ standalone enforcing ACL from a file the test fills from the Broker's ACL
    Secret, as the kubelet does for a pod that mounts it."""
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts: []\n")
    ns_port = free_port()
    proc = FerryProcess(["standalone", "--host", "127.0.0.1", "--namesrv-port", str(ns_port), "--broker-port",
                         str(free_port()), "--data-dir", str(tmp_path / "store"), "--set", "aclEnable=true",
                         "--set", f"aclFile={acl_file}"], "standalone is ready", tmp_path / "standalone.log").start()
    proc.acl_file = acl_file
    proc.namesrv_addr = f"127.0.0.1:{ns_port}"
    yield proc
    proc.stop()


def send_as(namesrv: str, credentials: Credentials) -> None:
    async def go():
        async with Producer("k8s-acl-producer", retry_times=0,
                            config=ClientConfig(namesrv_addr=namesrv, credentials=credentials)) as producer:
            await producer.send(Message("orders", b"signed by a User"))
    asyncio.run(go())


def test_a_user_is_an_account_until_it_is_deleted(control_plane, operator_logs, namespace, acl_broker):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(acl={"enabled": True}), ns)
    cp.apply(user_cr("orders-app", authorization={"topics": [{"name": "orders", "perm": "PUB|SUB"}],
                                                  "groups": [{"name": "billing", "perm": "SUB"}]}), ns)
    user = wait_status(cp, "user", "orders-app", ns, lambda o: (condition(o, "Ready") or {}).get("status") == "True",
                       "Ready")
    assert user["status"]["secretName"] == "orders-app-credentials" and user["status"]["accessKey"] == "orders-app"
    assert condition(user, "AclEnforced")["status"] == "True"
    keys = secret_data(cp, "orders-app-credentials", ns)
    assert keys["accessKey"] == "orders-app" and len(keys["secretKey"]) >= 24
    accounts = acl_accounts(cp, ns)
    assert accounts["orders-app"]["secretKey"] == keys["secretKey"]
    assert accounts["orders-app"]["topicPerms"] == ["orders=PUB|SUB"]
    assert accounts["ferrymq-operator"]["admin"] is True  # the operator's own account
    sts = cp.get("statefulset", f"{CLUSTER}-broker", ns)
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["acl"]["secret"]["secretName"] == f"{CLUSTER}-acl"

    # A real broker enforcing that file admits the User's client...
    credentials = Credentials(keys["accessKey"], keys["secretKey"])
    acl_broker.acl_file.write_text(secret_data(cp, f"{CLUSTER}-acl", ns)["plain_acl.yml"])
    poll_until("the User's send admitted", lambda: _sends(acl_broker.namesrv_addr, credentials), 15)
    # ...and refuses it once the User is deleted.
    cp.kubectl("delete", "user", "orders-app", "-n", ns, "--timeout=60s")
    poll_until("account gone from the ACL Secret", lambda: "orders-app" not in acl_accounts(cp, ns), 30)
    acl_broker.acl_file.write_text(secret_data(cp, f"{CLUSTER}-acl", ns)["plain_acl.yml"])
    poll_until("the revoked User refused", lambda: not _sends(acl_broker.namesrv_addr, credentials), 15)
    with pytest.raises(MQBrokerError, match="No acl config for orders-app"):
        send_as(acl_broker.namesrv_addr, credentials)


def _sends(namesrv: str, credentials: Credentials) -> bool:
    try:
        send_as(namesrv, credentials)
        return True
    except MQBrokerError:
        return False


def test_a_user_with_its_own_secret_and_a_missing_one(control_plane, operator_logs, namespace):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(acl={"enabled": True}), ns)
    cp.apply(user_cr("vault-synced-user", secretRef={"name": "from-vault"}), ns)
    wait_status(cp, "user", "vault-synced-user", ns,
                lambda o: (condition(o, "Ready") or {}).get("reason") == "SecretNotFound", "SecretNotFound")
    cp.kubectl("create", "secret", "generic", "from-vault", "-n", ns, "--from-literal=secretKey=brought-my-own-key")
    wait_status(cp, "user", "vault-synced-user", ns, lambda o: (condition(o, "Ready") or {}).get("status") == "True",
                "Ready")
    assert acl_accounts(cp, ns)["vault-synced-user"]["secretKey"] == "brought-my-own-key"


def test_tls_secret_is_mounted_and_switched_on(control_plane, operator_logs, namespace):
    cp, ns = control_plane, namespace
    cp.apply(broker_cr(tls={"secretName": "demo-tls"}), ns)
    sts = poll_until("broker StatefulSet", lambda: cp.get("statefulset", f"{CLUSTER}-broker", ns), 60)
    pod = sts["spec"]["template"]["spec"]
    assert {v["name"]: v for v in pod["volumes"]}["tls"]["secret"]["secretName"] == "demo-tls"
    conf = cp.get("configmap", f"{CLUSTER}-config", ns)["data"]["broker.conf"]
    assert "tlsMode=enforcing" in conf and "tlsServerCertPath=/etc/ferrymq-tls/tls.crt" in conf
    ns_sts = cp.get("statefulset", f"{CLUSTER}-namesrv", ns)
    assert "--tls-mode" in ns_sts["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize("obj,message", [
    (user_cr("short"), "metadata.name is no valid access key"),
    (user_cr("long-enough", accessKey="abc"), "spec.accessKey in body should match"),
    (user_cr("long-enough", authorization={"topics": [{"name": "orders", "perm": "WRITE"}]}),
     'Unsupported value: "WRITE"'),
    (user_cr("long-enough", authorization={"defaultTopicPerm": "ALL"}), 'Unsupported value: "ALL"'),
    ({"apiVersion": API, "kind": "User", "metadata": {"name": "no-broker-ref"}, "spec": {}},
     "spec.brokerRef: Required value"),
    (broker_cr(tls={"mode": "enforcing"}), "spec.tls needs secretName (a Secret with tls.crt and tls.key) or issuerRef"),
])
def test_invalid_users_are_rejected_by_the_api_server(control_plane, helm_release, namespace, obj, message):
    p = control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False)
    assert p.returncode != 0 and message in p.stderr, p.stderr


CERT_MANAGER_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "certificates.cert-manager.io"},
    "spec": {"group": "cert-manager.io", "scope": "Namespaced",
             "names": {"kind": "Certificate", "plural": "certificates", "singular": "certificate"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def test_tls_from_a_cert_manager_issuer(control_plane, operator_logs, namespace):
    """Without cert-manager the status says so; with its Certificate API the operator requests
    the certificate, and once the Secret exists TLS is ready. (cert-manager's API only: its
    controller cannot be installed here, so the test writes the Secret it would write.)"""
    cp, ns = control_plane, namespace
    if cp.get("crd", "certificates.cert-manager.io") is None:
        cp.apply(broker_cr(tls={"issuerRef": {"name": "ca-issuer"}}), ns)
        wait_status(cp, "broker", CLUSTER, ns, lambda o: (condition(o, "TlsReady") or {}).get("reason") == "CertManagerMissing",
                    "TlsReady=False CertManagerMissing")
        cp.apply(CERT_MANAGER_CRD)
        cp.kubectl("wait", "--for=condition=Established", "crd/certificates.cert-manager.io", "--timeout=60s")
    else:
        cp.apply(broker_cr(tls={"issuerRef": {"name": "ca-issuer"}}), ns)
    cert = poll_until("Certificate requested", lambda: cp.get("certificate.cert-manager.io", f"{CLUSTER}-tls", ns), 60)
    assert cert["spec"]["issuerRef"] == {"name": "ca-issuer", "kind": "Issuer", "group": "cert-manager.io"}
    assert cert["spec"]["secretName"] == f"{CLUSTER}-tls"
    wait_status(cp, "broker", CLUSTER, ns, lambda o: (condition(o, "TlsReady") or {}).get("reason") == "SecretNotFound",
                "waiting for the Secret")
    cp.kubectl("create", "secret", "generic", f"{CLUSTER}-tls", "-n", ns, "--from-literal=tls.crt=x",
               "--from-literal=tls.key=y")
    wait_status(cp, "broker", CLUSTER, ns, lambda o: (condition(o, "TlsReady") or {}).get("status") == "True",
                "TlsReady")
