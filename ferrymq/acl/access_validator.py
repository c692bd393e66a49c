"""Who may do what: RocketMQ 4.9's plain ACL checks, in its order.

1. the caller's address is globally white-listed → allowed;
2. an AccessKey is present, 3. it names an account;
4. the caller's address is the account's white-listed address → allowed;
5. the Signature matches the account's secret key;
6. permissions: admin-only request codes, then each resource the request touches (topics,
   and groups as their retry topic) against the account's listed perms or its defaults.

A denial raises :class:`AccessDenied` with RocketMQ's wording; :class:`AclGuard` turns it
into the answer 4.9 gives (SYSTEM_ERROR, remark ``AclException: <reason>``) before any
processor runs, so nothing is stored for a denied send.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from ferrymq.acl.plain_acl import AclConfig, Perm, permits
from ferrymq.acl.signature import ACCESS_KEY, signature_matches
from ferrymq.common.protocol import RETRY_GROUP_TOPIC_PREFIX, HeartbeatData, retry_topic
from ferrymq.common.trace_data import DEFAULT_TRACE_TOPIC
from ferrymq.common.transaction_batches import SEND_HALF_MESSAGES
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import consumer_group_field, topic_field

log = logging.getLogger(__name__)

__all__ = ["ADMIN_CODES", "NAMESRV_ADMIN_CODES", "AccessDenied", "AccessValidator", "AclGuard"]

# RocketMQ 4.9's Permission.ADMIN_CODE, plus the ACL updates themselves (4.9 lets any
# signed account change the ACL; FerryMQ asks for admin).
ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, RequestCode.DELETE_ACL_CONFIG, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
})  # fmt: skip


# What a name server with ACL on checks: the requests that change it. Route lookups and
# broker registration stay open (brokers and clients find each other through it).
NAMESRV_ADMIN_CODES = frozenset({
    RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG, RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.UPDATE_NAMESRV_CONFIG, RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER,
})  # fmt: skip
ADMIN_CODES = ADMIN_CODES | NAMESRV_ADMIN_CODES


class AccessDenied(Exception):
    """The request is refused; the message says why, as RocketMQ words it."""


# What a request's topic needs, by request code ("send": the producer's rule below); which
# field holds it, and which the consumer group, is the header table's (remoting/headers).
_SEND = "send"
_TOPIC_PERMS: dict[int, Perm | str] = {
    RequestCode.SEND_MESSAGE: _SEND, RequestCode.SEND_MESSAGE_V2: _SEND,
    RequestCode.SEND_BATCH_MESSAGE: _SEND,  # checked here although 4.9 skips batches
    SEND_HALF_MESSAGES: _SEND,  # FerryMQ's batch of half messages
    RequestCode.PULL_MESSAGE: Perm.SUB, RequestCode.QUERY_MESSAGE: Perm.SUB,
    RequestCode.LITE_PULL_MESSAGE: Perm.SUB,  # as a pull; Apache 5.3.1's plain ACL checks only its signature
    RequestCode.UPDATE_CONSUMER_OFFSET: Perm.SUB,
    RequestCode.RECALL_MESSAGE: Perm.PUB,  # RocketMQ 5.3.2's RecallMessageRequestHeader: PUB
}  # fmt: skip
# Requests whose consumer group is checked (as its retry topic, SUB); 4.9 checks the group of an
# offset update before its topic, and the topic of a pull before its group.
_GROUP_CHECKED = frozenset({
    RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE,
    RequestCode.UNREGISTER_CLIENT,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP, RequestCode.UPDATE_CONSUMER_OFFSET,
})  # fmt: skip
_GROUP_FIRST = frozenset({RequestCode.UPDATE_CONSUMER_OFFSET})


def _topic_resource(topic: str, perm: Perm | str) -> tuple[str, Perm]:
    if perm != _SEND:
        return topic, perm
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return topic, Perm.SUB  # sending into a group's retry topic is that group's business
    return topic, Perm.PUB


def _heartbeat_resources(request: RemotingCommand) -> dict[str, Perm]:
    try:
        heartbeat = HeartbeatData.from_json(request.body or b"{}")
    except ValueError as exc:
        raise AccessDenied(f"unreadable heartbeat: {exc}") from None
    needed: dict[str, Perm] = {}
    for consumer in heartbeat.consumer_data_set:
        needed[retry_topic(consumer.group_name)] = Perm.SUB
        for sub in consumer.subscription_data_set:
            needed[sub.topic] = Perm.SUB
    return needed


def needed_resources(request: RemotingCommand) -> dict[str, Perm]:
    """The topics (and groups, as retry topics) a request touches and the permission each needs."""
    ext, code = request.ext_fields, request.code
    if code == RequestCode.HEART_BEAT:
        return _heartbeat_resources(request)
    found: list[tuple[str, Perm]] = []
    perm = _TOPIC_PERMS.get(code)
    topic = ext.get(topic_field(code)) if perm is not None else None
    if topic is not None and (topic or perm == _SEND):  # a send's topic counts even when empty
        found.append(_topic_resource(topic, perm))
    group = ext.get(consumer_group_field(code)) if code in _GROUP_CHECKED else None
    if group:
        found.insert(0 if code in _GROUP_FIRST else len(found), (retry_topic(group), Perm.SUB))
    return dict(found)


class AccessValidator:
    """Checks requests against the current ACL; ``config`` is read per request, so a
    reloaded file applies to the very next one."""

    def __init__(self, config: Callable[[], AclConfig], trace_topic: str = DEFAULT_TRACE_TOPIC) -> None:
        """``trace_topic``: the broker's ``msgTraceTopicName``; a send to it, or to the default
        RMQ_SYS_TRACE_TOPIC (Apache's only one), needs no topic permission (docs/trace.md#acl)."""
        self._config = config
        self._trace_topics = frozenset({DEFAULT_TRACE_TOPIC, trace_topic})

    def check(self, request: RemotingCommand, remote_host: str) -> str | None:
        """Raises AccessDenied; returns the access key the request was allowed under
        (None when an address white list let it through)."""
        config = self._config()
        if any(pattern.matches(remote_host) for pattern in config.global_white_addresses):
            return None
        access_key = request.ext_fields.get(ACCESS_KEY)
        if not access_key:
            raise AccessDenied("No accessKey is configured")
        account = config.accounts.get(access_key)
        if account is None:
            raise AccessDenied(f"No acl config for {access_key}")
        if account.remote_address.matches(remote_host):
            return access_key
        if not signature_matches(request, account.secret_key):
            raise AccessDenied(f"Check signature failed for accessKey={access_key}")
        needed = needed_resources(request)
        if any(needed.get(topic) == Perm.PUB for topic in self._trace_topics):
            return access_key  # anyone signed may write message traces (as 4.9)
        if request.code in ADMIN_CODES and not account.admin:
            raise AccessDenied(f"Need admin permission for request code={request.code}, "
                               f"but accessKey={access_key} is not")
        if not account.resource_perms and account.admin:
            return access_key
        for resource, perm in needed.items():
            is_group = resource.startswith(RETRY_GROUP_TOPIC_PREFIX)
            owned = account.resource_perms.get(resource)
            if owned is None:
                owned = account.default_group_perm if is_group else account.default_topic_perm
            if not permits(perm, owned):
                what = f"group:{resource[len(RETRY_GROUP_TOPIC_PREFIX):]}" if is_group else f"topic:{resource}"
                raise AccessDenied(f"No default permission for {what}")  # 4.9's words, listed or not
        return access_key


class AclGuard:
    """The server's request guard: None lets the request through, a command answers it.
    With ``only``, requests of other codes pass unchecked (the name server's use)."""

    REPEAT_LOG_SECONDS = 60.0

    def __init__(self, validator: AccessValidator, only: frozenset[int] | None = None) -> None:
        self._validator = validator
        self._only = only
        self._logged: dict[tuple[str, str], float] = {}

    def __call__(self, request: RemotingCommand, remote_host: str) -> RemotingCommand | None:
        if self._only is not None and request.code not in self._only:
            return None
        try:
            self._validator.check(request, remote_host)
        except AccessDenied as exc:
            self._log(remote_host, request.code, str(exc))
            return request.response(ResponseCode.SYSTEM_ERROR, f"AclException: {exc}")
        return None

    def _log(self, host: str, code: int, reason: str) -> None:
        now = time.monotonic()
        key = (host, reason)
        if now - self._logged.get(key, -self.REPEAT_LOG_SECONDS) >= self.REPEAT_LOG_SECONDS:
            if len(self._logged) > 10_000:
                self._logged.clear()
            self._logged[key] = now
            log.warning("request %d from %s denied: %s", code, host, reason)
