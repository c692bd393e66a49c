"""Reconcile a User: its credentials Secret (generated once, or the one it names) and its
account in its Broker's ACL. ``sync_acl`` renders every account of a Broker into the
``<broker>-acl`` Secret the pods mount; Users and the Broker both call it, so the file is
whole whichever changed. A User is Ready once every broker accepts a request signed with its
credentials (the kubelet refreshes mounted Secrets within about a minute). A deleted User's
account leaves the file at once; brokers re-read it when the kubelet has updated the mount.

One reconcile is a row of small named steps over one ``UserContext`` (the typed model, its
Broker, the secret key and the brokers' answers, the status to write), as reconcile_group's:
``read_secret_key``, ``write_acl``, ``check_propagation``, ``report``; the decisions among them
(``secret_missing``, ``key_taken``, ``enforced_condition``, ``ready_condition``) are pure."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field

import kopf

from ferrymq.acl.signature import Credentials
from ferrymq.client.errors import MQClientError
from ferrymq_operator import acl, broker_admin, kube, status
from ferrymq_operator.acl import AclUser, UserSpecError
from ferrymq_operator.cluster_access import admin_client, broker_named, broker_of, client_tls, namesrv_addr
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import API_VERSION
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.settings import OperatorSettings
from ferrymq_operator.views import ResourceView

log = logging.getLogger("ferrymq.operator")


def _new_secret_key() -> str:
    return secrets.token_urlsafe(24)


async def _user_secret_key(user: AclUser) -> str | None:
    """The user's secret key: from the Secret it names, else from (or into) its own Secret."""
    if user.secret_ref is not None:
        name, key = user.secret_ref
        return acl.decode_secret_field(await kube.get("v1", "Secret", user.namespace, name), key)
    existing = acl.decode_secret_field(await kube.get("v1", "Secret", user.namespace, user.secret_name),
                                       acl.SECRET_KEY_FIELD)
    if existing:
        return existing
    secret_key = _new_secret_key()
    await kube.apply(acl.user_secret(user, secret_key))
    log.info("generated the secret key of User %s/%s into Secret %s", user.namespace, user.name, user.secret_name)
    return secret_key


async def _users(namespace: str) -> list[AclUser]:
    """The namespace's Users by name; one whose spec is invalid is left out (its own reconcile
    reports it as InvalidSpec)."""
    users = []
    for obj in await kube.list_(API_VERSION, "User", namespace):
        try:
            users.append(AclUser.from_resource(obj))
        except UserSpecError as e:
            log.debug("User %s/%s left out of the ACL: %s", namespace, ResourceView(obj).name, e)
    return sorted(users, key=lambda u: u.name)


async def ensure_operator_secret(cluster: BrokerCluster) -> str:
    secret = await kube.get("v1", "Secret", cluster.namespace, cluster.names.operator_secret)
    secret_key = acl.decode_secret_field(secret, acl.SECRET_KEY_FIELD)
    if not secret_key:
        secret_key = _new_secret_key()
        await kube.apply(acl.operator_secret(cluster, secret_key))
    return secret_key


async def sync_acl(cluster: BrokerCluster, *, without_uid: str | None = None) -> list[str]:
    """Render every account of ``cluster`` into its ACL Secret; returns the access keys left
    out (a User whose Secret is missing or whose key another User already has)."""
    accounts = [acl.operator_account(await ensure_operator_secret(cluster))]
    skipped: list[str] = []
    taken = {acl.OPERATOR_ACCESS_KEY}
    for user in await _users(cluster.namespace):
        if user.broker != cluster.name or user.deleting or user.uid == without_uid:
            continue
        secret_key = await _user_secret_key(user)
        if not secret_key or user.access_key in taken:
            skipped.append(user.access_key)
            continue
        taken.add(user.access_key)
        accounts.append(user.account(secret_key))
    await kube.apply(acl.acl_secret(cluster, accounts))
    return skipped


@dataclass
class UserContext:
    """One reconcile of a User: its model, its Broker, what was found, what status to write."""

    user: AclUser
    cluster: BrokerCluster
    fields: dict = field(default_factory=dict)   # status fields beside the conditions
    secret_key: str | None = None                # the account's secret key, once read
    skipped: list[str] = field(default_factory=list)       # access keys sync_acl left out of the file
    refusing: dict[str, str] = field(default_factory=dict)  # broker -> why it does not accept the account yet

    @classmethod
    def start(cls, user: AclUser, cluster: BrokerCluster) -> "UserContext":
        return cls(user, cluster, user_fields(user))


# ---------------------------------------------------------------------------- pure decisions

def user_fields(user: AclUser) -> dict:
    return {"accessKey": user.access_key, "secretName": user.secret_name}


def secret_missing(ctx: UserContext) -> Condition | None:
    """Ready=False SecretNotFound while the account has no secret key."""
    if ctx.secret_key is not None:
        return None
    name, key = ctx.user.secret_ref or (ctx.user.secret_name, acl.SECRET_KEY_FIELD)
    return status.not_ready("SecretNotFound", f"Secret {name} has no key {key}")


def key_taken(ctx: UserContext) -> Condition | None:
    """Ready=False AccessKeyTaken when another account of the Broker has the same access key."""
    if ctx.user.access_key not in ctx.skipped:
        return None
    return status.not_ready("AccessKeyTaken",
                            f"another account of Broker {ctx.cluster.name} has access key {ctx.user.access_key}")


def enforced_condition(cluster: BrokerCluster) -> Condition:
    """AclEnforced: whether the Broker asks for the account at all."""
    if cluster.acl_enabled:
        return Condition("AclEnforced", True, "Enabled", "")
    return Condition("AclEnforced", False, "AclDisabled", f"Broker {cluster.name} has spec.acl.enabled=false: "
                                                          "the account exists but nothing asks for it")


def ready_condition(ctx: UserContext) -> Condition:
    """Ready once every broker accepts the account; AclPropagating while some do not yet."""
    user, cluster = ctx.user, ctx.cluster
    if ctx.refusing:
        return status.not_ready("AclPropagating", f"account {user.access_key} written to the ACL of Broker {cluster.name}; "
                                "not accepted yet by " + ", ".join(f"{name} ({why})" for name, why in sorted(ctx.refusing.items())))
    return Condition("Ready", True, "Applied", f"account {user.access_key} in the ACL of Broker {cluster.name}")


# ---------------------------------------------------------------------------- steps with I/O

async def read_secret_key(ctx: UserContext) -> None:
    ctx.secret_key = await _user_secret_key(ctx.user)


async def write_acl(ctx: UserContext) -> None:
    ctx.skipped = await sync_acl(ctx.cluster)


async def check_propagation(ctx: UserContext, settings: OperatorSettings) -> None:
    """Which brokers do not accept the account yet (none asked when the Broker has ACL off)."""
    if ctx.cluster.acl_enabled:
        credentials = Credentials(ctx.user.access_key, ctx.secret_key)
        ctx.refusing = await brokers_not_accepting(ctx.cluster, credentials, settings)


def report(body, patch: kopf.Patch, ctx: UserContext) -> None:
    """Write the status. Brokers read the ACL from the mounted Secret, which the kubelet
    refreshes within about a minute: until every broker accepts the account with its current
    secret, Ready is False (AclPropagating) and the reconcile is retried in 10 s."""
    ready = ready_condition(ctx)
    status.finish(body, patch, [ready, enforced_condition(ctx.cluster)], ctx.fields, applied=ready.status)
    if not ready.status:
        raise kopf.TemporaryError(ready.message, delay=10)


async def reconcile_user(body, patch: kopf.Patch, settings: OperatorSettings) -> None:
    res = dict(body)
    if status.is_paused(res):
        return status.paused(body, patch)
    try:
        user = AclUser.from_resource(res)
    except UserSpecError as e:
        return status.finish(body, patch, [status.not_ready("InvalidSpec", str(e))], {"accessKey": acl.access_key(res)},
                             applied=False)
    cluster = await broker_named(user.namespace, user.broker, settings)
    if cluster is None:
        return status.finish(body, patch, [status.not_ready(
            "BrokerNotFound", f"Broker {user.broker} does not exist")], user_fields(user), applied=False)
    ctx = UserContext.start(user, cluster)
    await read_secret_key(ctx)
    stopped = secret_missing(ctx)
    if stopped is None:
        await write_acl(ctx)
        stopped = key_taken(ctx)
    if stopped is not None:
        return status.finish(body, patch, [stopped], ctx.fields, applied=False)
    await check_propagation(ctx, settings)
    report(body, patch, ctx)


async def brokers_not_accepting(cluster: BrokerCluster, credentials: Credentials,
                                settings: OperatorSettings) -> dict[str, str]:
    """Which of ``cluster``'s brokers do not accept ``credentials`` yet (name -> why); empty
    once every registered broker does, and there is at least one when the Broker wants any."""
    try:
        async with admin_client(settings, cluster) as admin:
            addrs = await broker_admin.brokers(admin, cluster.name)
    except MQClientError as e:
        return {"name servers": str(e)}
    if not addrs:
        # A broker that has not registered yet may still be running with the file it loaded
        # before this account was in it (seen on kind: Ready, then "No acl config"): wait.
        return {"brokers": "none registered with the name servers yet"} if cluster.replicas else {}
    return await broker_admin.brokers_refusing(namesrv_addr(settings, cluster), settings.admin_timeout, credentials,
                                               client_tls(cluster), addrs)


async def delete_user(body, settings: OperatorSettings) -> None:
    """The User is being deleted: its account leaves the Broker's ACL (its Secret goes with
    it through the owner reference)."""
    res = dict(body)
    if status.is_paused(res):
        return
    cluster = await broker_of(res, settings)
    if cluster is None or cluster.deleting:
        return
    try:
        await sync_acl(cluster, without_uid=ResourceView(res).uid)
    except Exception as e:  # noqa: BLE001 - retried: the account must not outlive the User
        raise kopf.TemporaryError(f"cannot update the ACL of Broker {cluster.name} yet: {e}", delay=5) from e
