"""ACL for gRPC calls (``aclEnable``): the 5.x clients' ``authorization`` header checked
against the broker's plain ACL accounts (the same plain_acl.yml as remoting clients).

    authorization: MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>
    x-mq-date-time: 20260101T120000Z

The signature is hex(HMAC-SHA1(secretKey, x-mq-date-time)). Then, as remoting requests are
checked: a white-listed address passes; an account's listed perms or its defaults decide for
each topic (PUB or SUB) and group (SUB) the call touches. A missing or wrong signature answers
UNAUTHORIZED (40100), a missing permission FORBIDDEN (40300).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Callable

from ferrymq.acl.plain_acl import AclConfig, Perm, permits
from ferrymq.common.protocol import retry_topic
from ferrymq.grpc.protocol import Code

_AUTHORIZATION = re.compile(r"^\s*MQv2-HMAC-SHA1\s+(.*)$")


@dataclass(frozen=True)
class Refusal:
    code: int
    message: str


def _fields(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        key, _, value = part.strip().partition("=")
        out[key.strip()] = value.strip()
    return out


class GrpcAuth:
    """``config``: the current ACL (re-read per call, so a reloaded file applies at once)."""

    def __init__(self, config: Callable[[], AclConfig]) -> None:
        self._config = config

    def check(self, metadata: dict[str, str], peer_host: str, *, topics: dict[str, Perm] | None = None,
              group: str = "") -> Refusal | None:
        """None when the call may go on."""
        config = self._config()
        if any(p.matches(peer_host) for p in config.global_white_addresses):
            return None
        header = metadata.get("authorization", "")
        match = _AUTHORIZATION.match(header)
        if not match:
            return Refusal(Code.UNAUTHORIZED, "authorization header missing or not MQv2-HMAC-SHA1")
        fields = _fields(match.group(1))
        access_key = fields.get("Credential", "").split("/")[0]
        account = config.accounts.get(access_key)
        if account is None:
            return Refusal(Code.UNAUTHORIZED, f"No acl config for {access_key}")
        if not account.remote_address.matches(peer_host):
            date_time = metadata.get("x-mq-date-time", "")
            expected = hmac.new(account.secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()
            if not date_time or not hmac.compare_digest(expected, fields.get("Signature", "").lower()):
                return Refusal(Code.UNAUTHORIZED, f"Check signature failed for accessKey={access_key}")
        if not account.resource_perms and account.admin:
            return None
        needed = dict(topics or {})
        for name, perm in needed.items():
            owned = account.resource_perms.get(name, account.default_topic_perm)
            if not permits(perm, owned):
                return Refusal(Code.FORBIDDEN, f"No permission for topic:{name} ({perm.name}) for {access_key}")
        if group:
            owned = account.resource_perms.get(retry_topic(group), account.default_group_perm)
            if not permits(Perm.SUB, owned):
                return Refusal(Code.FORBIDDEN, f"No permission for group:{group} for {access_key}")
        return None
