"""The User model and reconcile_user's named steps, each alone: the pure decisions on a
hand-made context, the Secret and ACL steps against an in-memory API server (no cluster)."""

from __future__ import annotations

import base64

import kopf
import pytest
import yaml

from ferrymq_operator import acl
from ferrymq_operator import reconcile_user as ru
from ferrymq_operator.acl import AclUser, UserSpecError
from ferrymq_operator.conditions import Condition
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.views import SecretView


def resource(name="orders-app", generation=2, uid="u1", **spec) -> dict:
    return {"kind": "User", "metadata": {"name": name, "namespace": "prod", "uid": uid, "generation": generation},
            "spec": {"brokerRef": {"name": "demo"}, **spec}}


def cluster(acl_enabled=True) -> BrokerCluster:
    return BrokerCluster.from_resource({"metadata": {"name": "demo", "namespace": "prod", "uid": "b1"},
                                        "spec": {"acl": {"enabled": acl_enabled}}})


def ctx_of(acl_enabled=True, secret_key="s3cret-key", **spec) -> ru.UserContext:
    ctx = ru.UserContext.start(AclUser.from_resource(resource(**spec)), cluster(acl_enabled))
    ctx.secret_key = secret_key
    return ctx


def secret(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "prod"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


# ---------------------------------------------------------------------------- the model

def test_model_defaults_and_names():
    u = AclUser.from_resource(resource())
    assert (u.name, u.namespace, u.broker, u.access_key, u.uid, u.generation) == ("orders-app", "prod", "demo",
                                                                                   "orders-app", "u1", 2)
    assert (u.admin, u.default_topic_perm, u.default_group_perm, u.topics, u.groups) == (False, "DENY", "DENY", (), ())
    assert u.secret_name == "orders-app-credentials" and u.secret_ref is None
    named = AclUser.from_resource(resource(accessKey="platform01", secretRef={"name": "vault"}, authorization={
        "admin": True, "topics": [{"name": "orders", "perm": "PUB|SUB"}]}))
    assert (named.access_key, named.secret_ref, named.secret_name) == ("platform01", ("vault", "secretKey"), "vault")
    assert named.admin and named.topics == (("orders", "PUB|SUB"),)


@pytest.mark.parametrize("name, spec, message", [
    ("app", {}, "metadata.name 'app' is no valid access key"),
    ("orders-app", {"accessKey": "abc"}, "spec.accessKey 'abc' is no valid access key"),
    ("orders-app", {"brokerRef": {}}, "spec.brokerRef.name is required"),
    ("orders-app", {"secretRef": {"key": "k"}}, "spec.secretRef.name is required"),
    ("orders-app", {"authorization": {"admin": "yes"}}, "spec.authorization.admin must be true or false, not 'yes'"),
    ("orders-app", {"authorization": {"defaultTopicPerm": "ALL"}},
     "spec.authorization.defaultTopicPerm must be one of DENY, PUB, SUB, PUB|SUB, not 'ALL'"),
    ("orders-app", {"authorization": {"groups": [{"perm": "SUB"}]}}, "spec.authorization.groups[0].name is required"),
    ("orders-app", {"authorization": {"topics": [{"name": "t", "perm": "RW"}]}},
     "spec.authorization.topics[0].perm must be one of"),
    ("app", {"authorization": {"defaultGroupPerm": "X"}},  # every bad value at once
     "valid access key (7 to 64 letters, digits, '.', '_', '-'); spec.authorization.defaultGroupPerm must be one of"),
])
def test_model_names_each_bad_value(spec_error, name, spec, message):
    assert message in spec_error(AclUser, UserSpecError, resource(name, **spec))


# ---------------------------------------------------------------------------- pure decisions

def test_context_fields():
    assert ctx_of().fields == {"accessKey": "orders-app", "secretName": "orders-app-credentials"}


def test_secret_missing_names_the_secret_and_key():
    assert ru.secret_missing(ctx_of()) is None
    assert ru.secret_missing(ctx_of(secret_key=None)) == Condition(
        "Ready", False, "SecretNotFound", "Secret orders-app-credentials has no key secretKey")
    assert ru.secret_missing(ctx_of(secret_key=None, secretRef={"name": "vault", "key": "k"})).message == (
        "Secret vault has no key k")


def test_key_taken():
    ctx = ctx_of()
    assert ru.key_taken(ctx) is None
    ctx.skipped = ["orders-app"]
    assert ru.key_taken(ctx) == Condition("Ready", False, "AccessKeyTaken",
                                          "another account of Broker demo has access key orders-app")


def test_enforced_and_ready_conditions():
    assert ru.enforced_condition(cluster(True)) == Condition("AclEnforced", True, "Enabled", "")
    off = ru.enforced_condition(cluster(False))
    assert (off.status, off.reason) == (False, "AclDisabled") and "spec.acl.enabled=false" in off.message
    ctx = ctx_of()
    assert ru.ready_condition(ctx) == Condition("Ready", True, "Applied", "account orders-app in the ACL of Broker demo")
    ctx.refusing = {"demo-broker-1": "No acl config", "demo-broker-0": "Check signature failed"}
    assert ru.ready_condition(ctx) == Condition(
        "Ready", False, "AclPropagating", "account orders-app written to the ACL of Broker demo; not accepted yet by "
                                          "demo-broker-0 (Check signature failed), demo-broker-1 (No acl config)")


# ---------------------------------------------------------------------------- steps with I/O

async def test_read_secret_key_generates_it_once_into_the_users_secret(fake_kube):
    ctx = ctx_of(secret_key=None)
    await ru.read_secret_key(ctx)
    stored = SecretView(fake_kube.objects[("Secret", "prod", "orders-app-credentials")])
    assert stored.field("secretKey") == ctx.secret_key and stored.field("accessKey") == "orders-app"
    again = ctx_of(secret_key=None)
    await ru.read_secret_key(again)
    assert again.secret_key == ctx.secret_key


async def test_read_secret_key_from_the_named_secret(fake_kube):
    ctx = ctx_of(secret_key=None, secretRef={"name": "vault", "key": "k"})
    await ru.read_secret_key(ctx)
    assert ctx.secret_key is None and ru.secret_missing(ctx).reason == "SecretNotFound"
    await fake_kube.apply(secret("vault", k="from-vault"))
    await ru.read_secret_key(ctx)
    assert ctx.secret_key == "from-vault" and not any(k == "orders-app-credentials" for _, _, k in fake_kube.objects)


async def test_write_acl_renders_every_valid_user_and_reports_a_taken_key(fake_kube):
    for obj in (resource(), resource("twin-app", uid="u2", accessKey="orders-app"), resource("bad", uid="u3")):
        await fake_kube.apply({**obj, "apiVersion": "ferrymq.io/v1alpha1"})
    await fake_kube.apply(secret("orders-app-credentials", secretKey="one-secret"))
    await fake_kube.apply(secret("twin-app-credentials", secretKey="two-secret"))
    ctx = ctx_of()
    await ru.write_acl(ctx)
    text = SecretView(fake_kube.objects[("Secret", "prod", "demo-acl")]).field(acl.ACL_FILE)
    keys = [a["accessKey"] for a in yaml.safe_load(text)["accounts"]]
    assert keys == ["ferrymq-operator", "orders-app"]  # "bad" is invalid: left out, not fatal
    assert ctx.skipped == ["orders-app"]  # the twin's, second by name


async def test_check_propagation_asks_the_brokers_only_with_acl_on(monkeypatch):
    asked = []

    async def not_accepting(cluster, credentials, settings):
        asked.append(credentials.access_key)
        return {"demo-broker-0": "No acl config"}
    monkeypatch.setattr(ru, "brokers_not_accepting", not_accepting)
    off = ctx_of(acl_enabled=False)
    await ru.check_propagation(off, None)
    on = ctx_of()
    await ru.check_propagation(on, None)
    assert asked == ["orders-app"] and off.refusing == {} and on.refusing == {"demo-broker-0": "No acl config"}


def test_report_ready_and_propagating(monkeypatch):
    monkeypatch.setattr(kopf, "event", lambda body, **kw: None)
    patch = kopf.Patch()
    ru.report(resource(), patch, ctx_of())
    st = patch["status"]
    assert [(c["type"], c["status"]) for c in st["conditions"]] == [("Ready", "True"), ("AclEnforced", "True")]
    assert st["observedGeneration"] == st["appliedGeneration"] == 2 and st["accessKey"] == "orders-app"
    ctx, patch = ctx_of(), kopf.Patch()
    ctx.refusing = {"demo-broker-0": "No acl config"}
    with pytest.raises(kopf.TemporaryError, match="not accepted yet by demo-broker-0"):
        ru.report(resource(), patch, ctx)
    assert patch["status"]["conditions"][0]["reason"] == "AclPropagating" and "appliedGeneration" not in patch["status"]


async def test_an_invalid_spec_is_reported_without_contacting_anything(reconcile_invalid):
    st = await reconcile_invalid(ru, ru.reconcile_user, resource("app"))
    ready = st["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec") and "access key" in ready["message"]
    assert "appliedGeneration" not in st and st["accessKey"] == "app"
