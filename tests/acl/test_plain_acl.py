"""plain_acl.yml as RocketMQ 4.9 reads it, and what the checks decide."""

from __future__ import annotations

import pytest

from ferrymq.acl.access_validator import AccessDenied, AccessValidator, needed_resources
from ferrymq.acl.plain_acl import AclConfigError, AddressPattern, Perm, load_acl_file, parse_acl, permits
from ferrymq.acl.signature import Credentials, sign_request
from ferrymq.common.protocol import ConsumerData, HeartbeatData, SubscriptionData
from ferrymq.common.transaction_batches import SEND_HALF_MESSAGES
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import RecallMessageHeader
from ferrymq.remoting.request_headers import SendMessageHeader

# The file Apache RocketMQ 4.9.7 ships as conf/plain_acl.yml (numbers unquoted, as there).
STOCK_PLAIN_ACL = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_the_stock_file_loads_with_rocketmqs_meanings(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(STOCK_PLAIN_ACL)
    acl = load_acl_file(path)
    assert [p.text for p in acl.global_white_addresses] == ["10.10.103.*", "192.168.0.*"]
    rocketmq = acl.accounts["RocketMQ"]
    assert rocketmq.secret_key == "12345678" and not rocketmq.admin
    assert rocketmq.default_topic_perm == Perm.DENY and rocketmq.default_group_perm == Perm.SUB
    assert rocketmq.resource_perms == {
        "topicA": Perm.DENY, "topicB": Perm.PUB | Perm.SUB, "topicC": Perm.SUB,
        "%RETRY%groupA": Perm.DENY, "%RETRY%groupB": Perm.PUB | Perm.SUB, "%RETRY%groupC": Perm.SUB,
    }
    admin = acl.accounts["rocketmq2"]
    assert admin.admin and admin.default_topic_perm == Perm.DENY  # missing default: DENY
    assert admin.remote_address.matches("192.168.1.77") and not admin.remote_address.matches("192.168.2.1")
    assert not rocketmq.remote_address.matches("127.0.0.1")  # blank matches nobody
    assert "12345678" not in repr(acl)  # secrets never in reprs or logs


@pytest.mark.parametrize("pattern, host, expected", [
    ("*", "10.1.2.3", True),
    ("*.*.*.*", "::1", True),
    ("192.168.0.1", "192.168.0.1", True),
    ("192.168.0.1", "192.168.0.2", False),
    ("192.168.0.1,192.168.0.2", "192.168.0.2", True),
    ("192.168.0.{1,2}", "192.168.0.2", True),
    ("192.168.0.{1,2}", "192.168.0.3", False),
    ("192.168.*", "192.168.44.7", True),
    ("192.168.*", "192.169.0.1", False),
    ("192.168.1.1-100", "192.168.1.100", True),
    ("192.168.1.1-100", "192.168.1.101", False),
    ("192.168.1-10.*", "192.168.5.200", True),
    ("::1", "::1", True),
    ("", "127.0.0.1", False),
    ("192.168.0.*", "not-an-address", False),
])
def test_address_patterns(pattern, host, expected):
    assert AddressPattern(pattern).matches(host) is expected


@pytest.mark.parametrize("doc, message", [
    ("accounts: [{accessKey: abcdefg, secretKey: '1234567', defaultTopicPerm: PUBB}]", "PUBB"),
    ("accounts: [{accessKey: abcdefg, secretKey: '1234567', topicPerms: [orders]}]", "'orders' is not 'name=PERM'"),
    ("accounts: [{accessKey: abc, secretKey: '1234567'}]", "at least 7 characters"),
    ("accounts: [{accessKey: abcdefg, secretKey: '1234567'}, {accessKey: abcdefg, secretKey: '7654321'}]",
     "defined twice"),
    ("accounts: [{accessKey: abcdefg, secretKey: '1234567', whiteRemoteAddress: 192.168.1.300}]",
     "not appear to be an IPv4"),
    ("accounts: [{accessKey: abcdefg, secretKey: '1234567', whiteRemoteAddress: 192.168.1.1-300}]", "not an octet"),
    ("accounts: [{accessKey: abcdefg, secretKey: '1234567', admin: sometimes}]", "true or false"),
    ("- just\n- a list", "must be a mapping"),
    ("accounts: [unclosed", "not valid YAML"),
])
def test_a_bad_file_is_refused_with_the_entry_named(tmp_path, doc, message):
    path = tmp_path / "plain_acl.yml"
    path.write_text(doc)
    with pytest.raises(AclConfigError, match=message) as info:
        load_acl_file(path)
    assert "1234567" not in str(info.value) and "7654321" not in str(info.value)


def test_permission_rules():
    assert permits(Perm.PUB, Perm.PUB | Perm.SUB) and not permits(Perm.PUB, Perm.SUB)
    assert permits(Perm.ANY, Perm.SUB) and not permits(Perm.ANY, Perm.DENY)
    assert not permits(Perm.SUB, Perm.DENY | Perm.SUB)  # DENY wins


def _send(topic: str, group: str = "PG") -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                   SendMessageHeader(producer_group=group, topic=topic).to_fields(), body=b"x")


def test_resources_of_requests():
    assert needed_resources(_send("orders")) == {"orders": Perm.PUB}
    assert needed_resources(_send("%RETRY%billing")) == {"%RETRY%billing": Perm.SUB}
    pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"consumerGroup": "billing", "topic": "orders",
                                                              "queueId": 0, "queueOffset": 0})
    assert needed_resources(pull) == {"orders": Perm.SUB, "%RETRY%billing": Perm.SUB}
    lite_pull = RemotingCommand.request(RequestCode.LITE_PULL_MESSAGE, pull.ext_fields)  # 5.x lite pull: the same
    assert needed_resources(lite_pull) == {"orders": Perm.SUB, "%RETRY%billing": Perm.SUB}
    heartbeat = HeartbeatData(client_id="c", consumer_data_set=[ConsumerData(
        group_name="billing", subscription_data_set=[SubscriptionData(topic="orders")])])
    hb = RemotingCommand.request(RequestCode.HEART_BEAT, {}, body=heartbeat.to_json())
    assert needed_resources(hb) == {"%RETRY%billing": Perm.SUB, "orders": Perm.SUB}
    recall = RemotingCommand.request(RequestCode.RECALL_MESSAGE, RecallMessageHeader(
        producer_group="PG", topic="orders", recall_handle="h").to_ext_fields())
    assert needed_resources(recall) == {"orders": Perm.PUB}  # a recall needs what a send needs
    halves = RemotingCommand.request(SEND_HALF_MESSAGES, _send("orders").ext_fields)
    assert needed_resources(halves) == {"orders": Perm.PUB}  # FerryMQ's batch of half messages: a send


def test_checks_in_rocketmqs_order():
    acl = parse_acl({
        "globalWhiteRemoteAddresses": ["10.0.0.*"],
        "accounts": [
            {"accessKey": "producer1", "secretKey": "secret-one", "topicPerms": ["orders=PUB"]},
            {"accessKey": "trusted1", "secretKey": "secret-two", "whiteRemoteAddress": "10.9.9.9"},
        ],
    })
    validator = AccessValidator(lambda: acl)

    def check(request, host="127.0.0.1"):
        try:
            return validator.check(request, host)
        except AccessDenied as exc:
            return str(exc)

    unsigned = _send("orders")
    assert check(unsigned, "10.0.0.5") is None  # globally white-listed: nothing else asked
    assert check(unsigned) == "No accessKey is configured"
    signed = _send("orders")
    sign_request(signed, Credentials("nobody12", "whatever1"))
    assert check(signed) == "No acl config for nobody12"
    forged = _send("orders")
    sign_request(forged, Credentials("producer1", "wrong-secret"))
    assert check(forged) == "Check signature failed for accessKey=producer1"
    good = _send("orders")
    sign_request(good, Credentials("producer1", "secret-one"))
    assert check(good) == "producer1"
    good.body = b"tampered"
    assert check(good) == "Check signature failed for accessKey=producer1"
    other = _send("payments")
    sign_request(other, Credentials("producer1", "secret-one"))
    assert check(other) == "No default permission for topic:payments"
    create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "orders"})
    sign_request(create, Credentials("producer1", "secret-one"))
    assert check(create) == "Need admin permission for request code=17, but accessKey=producer1 is not"
    from_trusted = _send("anything")
    from_trusted.ext_fields["AccessKey"] = "trusted1"  # its own address skips signature and perms
    assert check(from_trusted, "10.9.9.9") == "trusted1"


@pytest.mark.parametrize("configured", ["RMQ_SYS_TRACE_TOPIC", "OrdersTrace"])
def test_sends_to_the_trace_topic_need_no_topic_permission(configured):
    """RocketMQ 4.9.7 and 5.3.1 (PlainPermissionManager.validate) let any signed account send to
    RMQ_SYS_TRACE_TOPIC; FerryMQ also to the broker's msgTraceTopicName (docs/trace.md#acl)."""
    acl = parse_acl({"accounts": [{"accessKey": "producer1", "secretKey": "secret-one",
                                   "defaultTopicPerm": "DENY", "topicPerms": ["orders=PUB"]}]})
    validator = AccessValidator(lambda: acl, configured)

    def check(topic: str) -> str:
        request = _send(topic)
        sign_request(request, Credentials("producer1", "secret-one"))
        try:
            return validator.check(request, "127.0.0.1")
        except AccessDenied as exc:
            return str(exc)

    assert check(configured) == "producer1"
    assert check("RMQ_SYS_TRACE_TOPIC") == "producer1"  # Apache's, whatever the broker configures
    assert check("OtherTrace") == "No default permission for topic:OtherTrace"  # a client's own name: a topic


def test_signature_with_or_without_the_unique_key_query_field():
    """Clients up to 4.9.3 add _UNIQUE_KEY_QUERY after signing, later ones before."""
    acl = parse_acl({"accounts": [{"accessKey": "reader01", "secretKey": "secret-one", "defaultTopicPerm": "SUB"}]})
    validator = AccessValidator(lambda: acl)
    for signed_after in (True, False):
        query = RemotingCommand.request(RequestCode.QUERY_MESSAGE, {"topic": "orders", "key": "k", "maxNum": 32,
                                                                   "beginTimestamp": 0, "endTimestamp": 1})
        if not signed_after:
            query.ext_fields["_UNIQUE_KEY_QUERY"] = "false"
        sign_request(query, Credentials("reader01", "secret-one"))
        if signed_after:
            query.ext_fields["_UNIQUE_KEY_QUERY"] = "false"
        assert validator.check(query, "127.0.0.1") == "reader01"


def test_client_credentials_from_the_environment(monkeypatch):
    from ferrymq.client.config import ClientConfig

    monkeypatch.delenv("FERRYMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("FERRYMQ_SECRET_KEY", raising=False)
    assert ClientConfig().credentials is None
    monkeypatch.setenv("FERRYMQ_ACCESS_KEY", "orders-app")
    with pytest.raises(ValueError, match="FERRYMQ_SECRET_KEY is not"):
        ClientConfig()
    monkeypatch.setenv("FERRYMQ_SECRET_KEY", "app-secret-1")
    credentials = ClientConfig().credentials
    assert credentials == Credentials("orders-app", "app-secret-1") and "app-secret-1" not in repr(credentials)
