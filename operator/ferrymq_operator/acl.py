"""Users of a Broker's plain ACL: the typed model of a User resource and pure builders for
the Secrets around it.

* ``<user>-credentials``: the account's accessKey and secretKey for clients (owned by the
  User, so it goes with it), unless the User names a Secret of its own in ``secretRef``.
* ``<broker>-operator-credentials``: the operator's own admin account for that Broker.
* ``<broker>-acl``: ``plain_acl.yml`` with every account of the Broker, mounted into the
  name-server and broker pods; brokers re-read it on change, so accounts come and go
  without restarts.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import yaml

from ferrymq_operator.constants import API_VERSION, LABEL_COMPONENT, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME
from ferrymq_operator.model import BrokerCluster

OPERATOR_ACCESS_KEY = "ferrymq-operator"
ACL_FILE = "plain_acl.yml"
SECRET_KEY_FIELD = "secretKey"
ACCESS_KEY_FIELD = "accessKey"


@dataclass(frozen=True)
class AclUser:
    name: str
    namespace: str
    broker: str
    access_key: str
    uid: str | None = None
    generation: int | None = None
    secret_ref: tuple[str, str] | None = None  # (Secret name, key) the person provides
    admin: bool = False
    default_topic_perm: str = "DENY"
    default_group_perm: str = "DENY"
    topics: tuple[tuple[str, str], ...] = ()
    groups: tuple[tuple[str, str], ...] = ()
    white_remote_address: str = ""
    deleting: bool = False

    @classmethod
    def from_resource(cls, obj: dict) -> "AclUser":
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        auth = spec.get("authorization") or {}
        ref = spec.get("secretRef")
        return cls(
            name=meta["name"], namespace=meta.get("namespace") or "default", broker=spec["brokerRef"]["name"],
            access_key=spec.get("accessKey") or meta["name"], uid=meta.get("uid"), generation=meta.get("generation"),
            secret_ref=(ref["name"], ref.get("key") or SECRET_KEY_FIELD) if ref else None,
            admin=bool(auth.get("admin", False)),
            default_topic_perm=auth.get("defaultTopicPerm") or "DENY",
            default_group_perm=auth.get("defaultGroupPerm") or "DENY",
            topics=tuple((t["name"], t["perm"]) for t in auth.get("topics") or ()),
            groups=tuple((g["name"], g["perm"]) for g in auth.get("groups") or ()),
            white_remote_address=auth.get("whiteRemoteAddress") or "",
            deleting=bool(meta.get("deletionTimestamp")),
        )

    @property
    def secret_name(self) -> str:
        """The Secret clients read the keys from."""
        return self.secret_ref[0] if self.secret_ref else f"{self.name}-credentials"

    def owner_reference(self) -> dict:
        return {"apiVersion": API_VERSION, "kind": "User", "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": True}

    def account(self, secret_key: str) -> dict:
        """This user's entry of plain_acl.yml."""
        entry: dict = {"accessKey": self.access_key, "secretKey": secret_key, "admin": self.admin,
                       "defaultTopicPerm": self.default_topic_perm, "defaultGroupPerm": self.default_group_perm}
        if self.white_remote_address:
            entry["whiteRemoteAddress"] = self.white_remote_address
        if self.topics:
            entry["topicPerms"] = [f"{name}={perm}" for name, perm in self.topics]
        if self.groups:
            entry["groupPerms"] = [f"{name}={perm}" for name, perm in self.groups]
        return entry


def operator_account(secret_key: str) -> dict:
    return {"accessKey": OPERATOR_ACCESS_KEY, "secretKey": secret_key, "admin": True}


def plain_acl_yaml(accounts: list[dict]) -> str:
    """The file for the pods; accounts in access-key order so unchanged input renders the
    same bytes (no needless Secret updates)."""
    return yaml.safe_dump({"accounts": sorted(accounts, key=lambda a: a["accessKey"])}, sort_keys=False)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def decode_secret_field(secret: dict | None, key: str) -> str | None:
    value = ((secret or {}).get("data") or {}).get(key)
    return base64.b64decode(value).decode() if value else None


def _labels(cluster_name: str, component: str) -> dict[str, str]:
    return {LABEL_NAME: "ferrymq", LABEL_INSTANCE: cluster_name, LABEL_COMPONENT: component,
            LABEL_MANAGED_BY: "ferrymq-operator"}


def user_secret(user: AclUser, secret_key: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": user.secret_name, "namespace": user.namespace,
                         "labels": _labels(user.broker, "user"), "ownerReferences": [user.owner_reference()]},
            "data": {ACCESS_KEY_FIELD: _b64(user.access_key), SECRET_KEY_FIELD: _b64(secret_key)}}


def operator_secret(cluster: BrokerCluster, secret_key: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": cluster.names.operator_secret, "namespace": cluster.namespace,
                         "labels": _labels(cluster.name, "operator"), "ownerReferences": [cluster.owner_reference()]},
            "data": {ACCESS_KEY_FIELD: _b64(OPERATOR_ACCESS_KEY), SECRET_KEY_FIELD: _b64(secret_key)}}


def acl_secret(cluster: BrokerCluster, accounts: list[dict]) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": cluster.names.acl_secret, "namespace": cluster.namespace,
                         "labels": _labels(cluster.name, "broker"), "ownerReferences": [cluster.owner_reference()]},
            "data": {ACL_FILE: _b64(plain_acl_yaml(accounts))}}
