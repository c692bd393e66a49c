"""Users and the Broker's ACL and TLS settings as the operator renders them: the file the
brokers load, the Secrets, the pods' mounts and arguments, and the Spark job's credentials."""

from __future__ import annotations

import base64

import yaml

from ferrymq.acl.plain_acl import Perm, parse_acl
from ferrymq.broker.config import build_broker_settings
from ferrymq_operator import acl, manifests
from ferrymq_operator.acl import AclUser
from ferrymq_operator.model import BrokerCluster
from ferrymq_spark import k8s_cronjob


def broker(**spec) -> BrokerCluster:
    return BrokerCluster.from_resource({"apiVersion": "ferrymq.io/v1alpha1", "kind": "Broker",
                                        "metadata": {"name": "demo", "namespace": "prod", "uid": "u-1"},
                                        "spec": spec})


def user(name: str = "orders-app", **spec) -> AclUser:
    return AclUser.from_resource({"metadata": {"name": name, "namespace": "prod", "uid": f"uid-{name}"},
                                  "spec": {"brokerRef": {"name": "demo"}, **spec}})


def test_users_render_into_a_file_the_broker_loads():
    app = user(authorization={"defaultTopicPerm": "SUB", "topics": [{"name": "orders", "perm": "PUB|SUB"}],
                              "groups": [{"name": "billing", "perm": "SUB"}], "whiteRemoteAddress": "10.0.0.*"})
    admin = user("platform-admin", accessKey="platform01", authorization={"admin": True})
    text = acl.plain_acl_yaml([app.account("app-secret-1"), admin.account("admin-secret"),
                               acl.operator_account("operator-secret")])
    loaded = parse_acl(yaml.safe_load(text))
    assert list(loaded.accounts) == ["ferrymq-operator", "orders-app", "platform01"]
    account = loaded.accounts["orders-app"]
    assert account.secret_key == "app-secret-1" and not account.admin
    assert account.default_topic_perm == Perm.SUB and account.default_group_perm == Perm.DENY
    assert account.resource_perms == {"orders": Perm.PUB | Perm.SUB, "%RETRY%billing": Perm.SUB}
    assert account.remote_address.matches("10.0.0.7")
    assert loaded.accounts["platform01"].admin and loaded.accounts["ferrymq-operator"].admin


def test_secrets_are_owned_and_carry_the_keys():
    u = user()
    secret = acl.user_secret(u, "generated-secret")
    assert secret["metadata"]["name"] == "orders-app-credentials" == u.secret_name
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "User"
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {
        "accessKey": "orders-app", "secretKey": "generated-secret"}
    assert user(secretRef={"name": "vault-synced"}).secret_name == "vault-synced"
    cluster = broker(acl={"enabled": True})
    acl_secret = acl.acl_secret(cluster, [acl.operator_account("s3cr3t-operator")])
    assert acl_secret["metadata"]["name"] == "demo-acl" and acl_secret["metadata"]["ownerReferences"][0]["kind"] == "Broker"
    assert "s3cr3t-operator" in base64.b64decode(acl_secret["data"]["plain_acl.yml"]).decode()
    assert acl.operator_secret(cluster, "x")["metadata"]["name"] == "demo-operator-credentials"


def test_acl_and_tls_reach_the_pods():
    cluster = broker(acl={"enabled": True}, tls={"secretName": "demo-tls", "mode": "enforcing"})
    conf = manifests.broker_conf(cluster)
    assert conf["aclEnable"] == "true" and conf["aclFile"] == "/etc/ferrymq-acl/plain_acl.yml"
    assert conf["tlsMode"] == "enforcing" and conf["useTLS"] == "true"
    assert manifests.broker_conf_error(cluster) is None  # valid, though the files exist only in the pod
    build_broker_settings(conf)
    sts = manifests.broker_statefulset(cluster)
    pod = sts["spec"]["template"]["spec"]
    assert {"name": "acl", "secret": {"secretName": "demo-acl"}} in pod["volumes"]
    assert {"name": "tls", "secret": {"secretName": "demo-tls"}} in pod["volumes"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["acl"] == "/etc/ferrymq-acl" and mounts["tls"] == "/etc/ferrymq-tls"
    ns_args = manifests.namesrv_statefulset(cluster)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ns_args[ns_args.index("--tls-mode") + 1] == "enforcing" and "--acl-file" in ns_args
    plain = broker()
    assert "aclEnable" not in manifests.broker_conf(plain) and "--tls-mode" not in str(manifests.all_objects(plain))
    assert manifests.config_hash(plain) != manifests.config_hash(cluster)  # switching either on restarts brokers


def test_spark_job_credentials_come_from_the_secret_only():
    group = {"apiVersion": "ferrymq.io/v1alpha1", "kind": "ConsumerGroup",
             "metadata": {"name": "billing", "namespace": "prod", "uid": "g-1"},
             "spec": {"brokerRef": {"name": "demo"}, "sparkJob": {
                 "schedule": "@hourly", "topics": ["orders"], "output": "/out", "credentialsSecret": "orders-app-credentials"}}}
    objects = k8s_cronjob.build_spark_job(group, "demo-namesrv:9876")
    cron = next(o for o in objects if o["kind"] == "CronJob")
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["FERRYMQ_SECRET_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "orders-app-credentials", "key": "secretKey"}}
    args = container["args"]
    assert "spark.kubernetes.executor.secretKeyRef.FERRYMQ_SECRET_KEY=orders-app-credentials:secretKey" in args


def test_a_cert_manager_issuer_becomes_a_certificate_for_every_name():
    cluster = broker(tls={"issuerRef": {"name": "letsencrypt", "kind": "ClusterIssuer"}})
    assert cluster.tls_secret == "demo-tls" and cluster.tls_issuer == ("letsencrypt", "ClusterIssuer")
    cert = manifests.certificate(cluster)
    assert cert["metadata"]["name"] == "demo-tls" and cert["metadata"]["ownerReferences"][0]["kind"] == "Broker"
    assert cert["spec"]["secretName"] == "demo-tls"
    assert cert["spec"]["issuerRef"] == {"name": "letsencrypt", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert {"demo-namesrv.prod.svc", "*.demo-broker-headless.prod.svc", "*.demo-namesrv-headless.prod.svc"} <= set(
        cert["spec"]["dnsNames"])
    assert manifests.broker_conf(cluster)["tlsServerCertPath"] == "/etc/ferrymq-tls/tls.crt"
