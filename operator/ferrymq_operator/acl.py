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
import re
from dataclasses import dataclass
from typing import Any, Mapping

import yaml

from ferrymq_operator import spec_checks
from ferrymq_operator.constants import API_VERSION, LABEL_COMPONENT, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME
from ferrymq_operator.model import BrokerCluster
from ferrymq_operator.spec_checks import BrokerChild, SpecError
from ferrymq_operator.views import ResourceView, SecretView

OPERATOR_ACCESS_KEY = "ferrymq-operator"
ACL_FILE = "plain_acl.yml"
SECRET_KEY_FIELD = "secretKey"
ACCESS_KEY_FIELD = "accessKey"
PERMS = ("DENY", "PUB", "SUB", "PUB|SUB")
ACCESS_KEY = re.compile(r"[a-zA-Z0-9._-]{7,64}")  # the CRD's pattern (RocketMQ: longer than 6)


class UserSpecError(SpecError):
    """A User's spec the operator cannot act on (the CRD's schema rejects these first; this
    guards objects stored before a rule existed and hand-made dicts)."""


def access_key(resource: dict) -> str:
    """spec.accessKey, else the resource's name (read without validating it)."""
    res = ResourceView(resource)
    return res.spec.get("accessKey") or res.name


def _perm(auth: Mapping[str, Any], key: str, errors: list[str]) -> str:
    return spec_checks.one_of(auth.get(key) or "DENY", PERMS, f"spec.authorization.{key}", errors)


def _resource_perms(auth: Mapping[str, Any], key: str, errors: list[str]) -> tuple[tuple[str, str], ...]:
    """spec.authorization.topics or .groups: (name, perm) pairs, each with both set."""
    out = []
    for i, entry in enumerate(auth.get(key) or ()):
        where = f"spec.authorization.{key}[{i}]"
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if not name:
            errors.append(f"{where}.name is required")
            continue
        out.append((name, spec_checks.one_of(entry.get("perm"), PERMS, f"{where}.perm", errors)))
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class AclUser(BrokerChild):
    """The typed model of a User resource: defaults applied and values checked once, when it
    is read (``from_resource``)."""

    access_key: str                 # spec.accessKey, else the resource's name
    secret_ref: tuple[str, str] | None = None  # (Secret name, key) the person provides
    admin: bool = False
    default_topic_perm: str = "DENY"
    default_group_perm: str = "DENY"
    topics: tuple[tuple[str, str], ...] = ()
    groups: tuple[tuple[str, str], ...] = ()
    white_remote_address: str = ""

    @classmethod
    def from_resource(cls, obj: dict) -> "AclUser":
        """The model of a User (a dict as kopf or the API server hands it over). Raises
        UserSpecError naming every bad value."""
        res = ResourceView(obj)
        spec = res.spec
        auth = spec.get("authorization") or {}
        ref = spec.get("secretRef")
        errors: list[str] = []
        common = BrokerChild.common(res, errors)
        key = access_key(obj)
        if not isinstance(key, str) or not ACCESS_KEY.fullmatch(key):
            errors.append(f"{'spec.accessKey' if spec.get('accessKey') else 'metadata.name'} {key!r} is no valid "
                          "access key (7 to 64 letters, digits, '.', '_', '-')")
        if ref is not None and not (isinstance(ref, Mapping) and ref.get("name")):
            errors.append("spec.secretRef.name is required")
            ref = None
        user = cls(
            **common, access_key=key,
            secret_ref=(ref["name"], ref.get("key") or SECRET_KEY_FIELD) if ref else None,
            admin=spec_checks.bool_of(auth, "admin", False, errors, "spec.authorization"),
            default_topic_perm=_perm(auth, "defaultTopicPerm", errors),
            default_group_perm=_perm(auth, "defaultGroupPerm", errors),
            topics=_resource_perms(auth, "topics", errors),
            groups=_resource_perms(auth, "groups", errors),
            white_remote_address=auth.get("whiteRemoteAddress") or "",
        )
        spec_checks.raise_errors(errors, UserSpecError)
        return user

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
    return SecretView.of(secret).field(key)


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
