"""The ACL admin headers mqadmin sends (CreateAccessConfigRequestHeader and friends;
docs/wire-format.md#typed-headers)."""

from __future__ import annotations

from ferrymq.remoting.headers.base import BOOL, Header, header, wire


@header
class SessionCredentialsHeader(Header):
    """What a signed request carries besides its own header (RocketMQ's SessionCredentials, added
    by AclClientRPCHook to any request; ferrymq/acl/signature.py)."""

    access_key: str | None = wire("AccessKey")
    security_token: str | None = wire("SecurityToken")
    signature: str | None = wire("Signature")


ACCESS_KEY, SECURITY_TOKEN, SIGNATURE = SessionCredentialsHeader.wire_names()


@header
class CreateAccessConfigHeader(Header):
    """UPDATE_AND_CREATE_ACL_CONFIG: the account's fields as plain_acl.yml names them (absent:
    left as they are)."""

    access_key: str = wire("accessKey", required=True)
    secret_key: str | None = wire("secretKey")
    white_remote_address: str | None = wire("whiteRemoteAddress")
    default_topic_perm: str | None = wire("defaultTopicPerm")
    default_group_perm: str | None = wire("defaultGroupPerm")
    topic_perms: str | None = wire("topicPerms")
    group_perms: str | None = wire("groupPerms")
    admin: bool = wire("admin", BOOL, False)

    TEXT_FIELDS = ("secret_key", "white_remote_address", "default_topic_perm", "default_group_perm")
    LIST_FIELDS = ("topic_perms", "group_perms")

    def account_fields(self) -> dict[str, object]:
        """The fields the request sets, under their plain_acl.yml names (lists split at commas)."""
        wire_of = dict(zip(self.ATTRS, self.wire_names()))
        fields: dict[str, object] = {wire_of[a]: getattr(self, a) for a in self.TEXT_FIELDS if getattr(self, a)}
        fields.update({wire_of[a]: split_list(getattr(self, a)) for a in self.LIST_FIELDS if getattr(self, a)})
        fields[wire_of["admin"]] = self.admin
        return fields


@header
class DeleteAccessConfigHeader(Header):
    """DELETE_ACL_CONFIG."""

    access_key: str = wire("accessKey", required=True)


@header
class UpdateGlobalWhiteAddrsHeader(Header):
    """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: addresses separated by commas."""

    global_white_addrs: str | None = wire("globalWhiteAddrs")


@header
class BrokerAclConfigResponseHeader(Header):
    """GET_BROKER_CLUSTER_ACL_INFO's answer."""

    version: str | None = wire("version")
    all_acl_file_version: str | None = wire("allAclFileVersion")
    broker_name: str | None = wire("brokerName")
    broker_addr: str | None = wire("brokerAddr")
    cluster_name: str | None = wire("clusterName")


def split_list(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]
