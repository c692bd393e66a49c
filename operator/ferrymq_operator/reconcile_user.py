"""Reconcile a User: its credentials Secret (generated once, or the one it names) and its
account in its Broker's ACL. ``sync_acl`` renders every account of a Broker into the
``<broker>-acl`` Secret the pods mount; Users and the Broker both call it, so the file is
whole whichever changed. A User is Ready once every broker accepts a request signed with its
credentials (the kubelet refreshes mounted Secrets within about a minute). A deleted User's
account leaves the file at once; brokers re-read it when the kubelet has updated the mount."""

from __future__ import annotations

import logging
import secrets

import kopf

from ferrymq.acl.signature import Credentials
from ferrymq.client.errors import MQClientError
from ferrymq_operator import acl, broker_admin, kube, status
from ferrymq_operator.acl import AclUser
from ferrymq_operator.cluster_access import admin_client, broker_of, client_tls, namesrv_addr
from ferrymq_operator.conditions import Condition
from ferrymq_operator.constants import API_VERSION
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.settings import OperatorSettings

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
    users = sorted((AclUser.from_resource(obj) for obj in await kube.list_(API_VERSION, "User", cluster.namespace)),
                   key=lambda u: u.name)
    for user in users:
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


async def reconcile_user(body, patch: kopf.Patch, settings: OperatorSettings) -> None:
    res = dict(body)
    if status.is_paused(res):
        return status.paused(body, patch)
    user = AclUser.from_resource(res)
    extra = {"accessKey": user.access_key, "secretName": user.secret_name}
    cluster = await broker_of(res, settings)
    if cluster is None:
        return status.finish(body, patch, [status.not_ready(
            "BrokerNotFound", f"Broker {user.broker} does not exist")], extra, applied=False)
    secret_key = await _user_secret_key(user)
    if secret_key is None:
        name, key = user.secret_ref or (user.secret_name, acl.SECRET_KEY_FIELD)
        return status.finish(body, patch, [status.not_ready(
            "SecretNotFound", f"Secret {name} has no key {key}")], extra, applied=False)
    skipped = await sync_acl(cluster)
    if user.access_key in skipped:
        return status.finish(body, patch, [status.not_ready(
            "AccessKeyTaken", f"another account of Broker {cluster.name} has access key {user.access_key}")],
            extra, applied=False)
    enforced = Condition("AclEnforced", cluster.acl_enabled, "Enabled" if cluster.acl_enabled else "AclDisabled",
                         "" if cluster.acl_enabled else f"Broker {cluster.name} has spec.acl.enabled=false: "
                                                        "the account exists but nothing asks for it")
    credentials = Credentials(user.access_key, secret_key)
    refusing = await brokers_not_accepting(cluster, credentials, settings) if cluster.acl_enabled else {}
    if refusing:
        # Brokers read the ACL from the mounted Secret, which the kubelet refreshes within about
        # a minute: Ready only once every broker accepts the account with its current secret.
        message = (f"account {user.access_key} written to the ACL of Broker {cluster.name}; not accepted yet by "
                   + ", ".join(f"{name} ({why})" for name, why in sorted(refusing.items())))
        status.finish(body, patch, [status.not_ready("AclPropagating", message), enforced], extra, applied=False)
        raise kopf.TemporaryError(message, delay=10)
    status.finish(body, patch, [Condition("Ready", True, "Applied",
                                          f"account {user.access_key} in the ACL of Broker {cluster.name}"), enforced],
                  extra)


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
        await sync_acl(cluster, without_uid=res["metadata"].get("uid"))
    except Exception as e:  # noqa: BLE001 - retried: the account must not outlive the User
        raise kopf.TemporaryError(f"cannot update the ACL of Broker {cluster.name} yet: {e}", delay=5) from e
