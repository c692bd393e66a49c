"""Messages between the v2 protocol and FerryMQ's store model.

Sending: a gRPC ``Message`` becomes a remoting SEND_MESSAGE_V2 request (so the broker's one
send path applies every check), after its body digest and encoding are honoured and its type
checked against what it carries. Receiving: a stored ``MessageExt`` becomes a gRPC ``Message``
with a body digest, its receipt handle and delivery attempt.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import time
import zlib
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from ferrymq.broker.timer_send import beyond_max_delay, max_delay_ms
from ferrymq.common.message import MessageExt, Prop, decompress_body
from ferrymq.common.protocol import RETRY_GROUP_TOPIC_PREFIX
from ferrymq.common.validators import topic_error
from ferrymq.grpc.protocol import Code, DigestType, Encoding, MessageType, pb
from ferrymq.remoting.request_headers import SendMessageHeader
from ferrymq.store.config import StoreConfig

SHARDING_KEY = "__SHARDINGKEY"  # RocketMQ 5's message group property (MessageConst.PROPERTY_SHARDING_KEY)
TRACE_CONTEXT = Prop.TRACE_CONTEXT
BORN_HOST = "__BORNHOST"
# Properties the broker or the protocol sets: a client may not send them as user properties,
# and they are not shown back as user properties.
SYSTEM_PROPERTIES = frozenset(
    v for k, v in vars(Prop).items() if k.isupper() and isinstance(v, str)) | {SHARDING_KEY, TRACE_CONTEXT, BORN_HOST}


def grpc_producer_group(topic: str) -> str:
    """The producer group a v2 message is stored under (v2 producers have none): one per topic,
    so the transaction check-back asks a producer that publishes the topic, and EndTransaction's
    half-message lookup compares it."""
    return f"FERRYMQ_GRPC_PRODUCER%{topic}"


def transaction_id(commit_log_offset: int, queue_offset: int, message_id: str) -> str:
    """What EndTransaction needs to find a half message: its CommitLog and queue offsets."""
    return f"{commit_log_offset:x}.{queue_offset:x}.{message_id}"


def parse_transaction_id(text: str) -> tuple[int, int] | None:
    try:
        commit_log_hex, queue_hex, _ = text.split(".", 2)
        return int(commit_log_hex, 16), int(queue_hex, 16)
    except ValueError:
        return None


class MessageRefused(Exception):
    """A message the broker will not take: ``code`` is the v2 status code for the client."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class OutgoingSend:
    """One gRPC message ready for the send path: the header a remoting client would send
    (its properties left empty) and the properties themselves, not written out as text."""

    header: SendMessageHeader
    properties: dict[str, str]
    body: bytes
    message_id: str
    message_type: int


# Java's Character.isISOControl, which Apache's proxy refuses in tags, keys and properties (two of
# them, 0x01 and 0x02, separate the properties in a stored record)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _plain(text: str) -> bool:
    """No control character in ``text`` (printable ASCII, the common case, is told without the regex)."""
    return text.isascii() and text.isprintable() or not _CONTROL.search(text)


# rocketmq-python-client 5.1.x writes a delivery time given in epoch milliseconds (as its docs
# ask) into Timestamp.seconds unchanged. No real time has that many seconds (year 5138+), so a
# value past this is read as milliseconds: the official Python client's delays work unchanged.
_SECONDS_THAT_ARE_MILLIS = 10**11


def timestamp_ms(ts: Timestamp) -> int:
    if ts.seconds >= _SECONDS_THAT_ARE_MILLIS:
        return ts.seconds
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def to_timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(d: Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def to_duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _digest(kind: int, body: bytes) -> str:
    if kind == DigestType.CRC32:
        return format(zlib.crc32(body) & 0xFFFFFFFF, "08X")
    if kind == DigestType.MD5:
        return hashlib.md5(body).hexdigest().upper()
    if kind == DigestType.SHA1:
        return hashlib.sha1(body).hexdigest().upper()
    raise MessageRefused(Code.BAD_REQUEST, f"unsupported body digest type {kind}")


def check_body(message: pb.Message) -> bytes:
    """The body as stored: digest checked against what was sent, GZIP undone."""
    system = message.system_properties
    body = message.body
    if system.HasField("body_digest") and system.body_digest.type != DigestType.DIGEST_TYPE_UNSPECIFIED:
        expected = system.body_digest.checksum
        actual = _digest(system.body_digest.type, body)
        # CRC32 hex: Python pads to 8 digits, Java does not; digests compare without case
        if expected.upper().lstrip("0") != actual.lstrip("0"):
            raise MessageRefused(Code.MESSAGE_CORRUPTED,
                                 f"body digest mismatch: {DigestType.Name(system.body_digest.type)} "
                                 f"{expected} sent, {actual} computed")
    if system.body_encoding == Encoding.GZIP:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError) as exc:
            raise MessageRefused(Code.MESSAGE_CORRUPTED, f"body marked GZIP does not decompress: {exc}") from None
    elif system.body_encoding not in (Encoding.ENCODING_UNSPECIFIED, Encoding.IDENTITY):
        raise MessageRefused(Code.BAD_REQUEST, f"unsupported body encoding {system.body_encoding}")
    if not body:
        raise MessageRefused(Code.MESSAGE_BODY_EMPTY, "message body is empty")
    return body


def message_type_of(message: pb.Message) -> int:
    """The type the message's content implies (what it carries), checked against what it says."""
    system = message.system_properties
    carried = MessageType.NORMAL
    if system.message_group:
        carried = MessageType.FIFO
    if system.HasField("delivery_timestamp"):
        if carried == MessageType.FIFO:
            raise MessageRefused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                 "a message cannot have both a message group and a delivery timestamp")
        carried = MessageType.DELAY
    declared = system.message_type
    if declared == MessageType.TRANSACTION:
        if carried != MessageType.NORMAL:
            raise MessageRefused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                 "a transactional message cannot have a message group or a delivery timestamp")
        return declared
    if declared not in (MessageType.MESSAGE_TYPE_UNSPECIFIED, carried):
        raise MessageRefused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                             f"message type {MessageType.Name(declared)} conflicts with its properties "
                             f"({MessageType.Name(carried)})")
    return carried


def delivery_time(message: pb.Message, store_config: StoreConfig, now_ms: int) -> int:
    """A DELAY message's delivery time in epoch ms, to be timed by the broker's timer
    (docs/timers.md): refused as Apache's proxy refuses it when it is further ahead than a timer
    may be."""
    due = timestamp_ms(message.system_properties.delivery_timestamp)
    if beyond_max_delay(due, now_ms, store_config):
        raise MessageRefused(Code.ILLEGAL_DELIVERY_TIME,
                             f"the max delay time of message is too large, max is {max_delay_ms(store_config)}")
    return due


# what a control character in one of these is refused as (anything else: a property's key or value)
_CONTROL_REFUSALS = {Prop.TAGS: (Code.ILLEGAL_MESSAGE_TAG, "tag"), Prop.KEYS: (Code.ILLEGAL_MESSAGE_KEY, "keys"),
                     SHARDING_KEY: (Code.ILLEGAL_MESSAGE_GROUP, "message group"),
                     Prop.UNIQ_KEY: (Code.ILLEGAL_MESSAGE_ID, "message id")}


def _control_refusal(props: dict[str, str]) -> MessageRefused:
    """Why a message whose properties hold a control character is refused (naming the first)."""
    for key, value in props.items():
        if not _plain(key) or not _plain(value):
            code, what = _CONTROL_REFUSALS.get(key, (Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {key!r}"))
            return MessageRefused(code, f"{what} may not contain a control character: {value!r}")
    return MessageRefused(Code.BAD_REQUEST, "a control character in the message's properties")


def outgoing(message: pb.Message, *, queue_id: int, store_config: StoreConfig,
             now_ms: int | None = None) -> OutgoingSend:
    """A v2 message as the send path's request; MessageRefused when it cannot be. A delivery
    timestamp becomes TIMER_DELIVER_MS: the send path times it as it times a remoting client's."""
    topic = message.topic
    if topic.resource_namespace:
        raise MessageRefused(Code.BAD_REQUEST, "resource namespaces are not supported by FerryMQ")
    name = topic.name
    error = topic_error(name)
    if error:
        raise MessageRefused(Code.ILLEGAL_TOPIC, f"topic {name!r} is invalid: {error}")
    system = message.system_properties
    message_type = message_type_of(message)
    body = check_body(message)
    props: dict[str, str] = {}
    user_properties = message.user_properties
    for key, value in user_properties.items() if user_properties else ():  # (items(): a Python-level view)
        if not key or key in SYSTEM_PROPERTIES:
            raise MessageRefused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {key!r} is reserved or empty")
        if not _plain(key + value):
            raise _control_refusal({key: value})
        if value:  # an empty value is no property (a stored record cannot carry one)
            props[key] = value
    tag = system.tag
    if tag:
        if "||" in tag:
            raise MessageRefused(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} may not contain '||'")
        props[Prop.TAGS] = tag
    keys = " ".join(system.keys)
    if keys:
        props[Prop.KEYS] = keys
    message_id = system.message_id
    if not message_id:
        raise MessageRefused(Code.ILLEGAL_MESSAGE_ID, "message id is missing")
    props[Prop.UNIQ_KEY] = message_id
    born_host, trace_context, group = system.born_host, system.trace_context, system.message_group
    if born_host:
        props[BORN_HOST] = born_host
    if trace_context:
        props[TRACE_CONTEXT] = trace_context
    if not _plain(f"{tag}{keys}{message_id}{born_host}{trace_context}{group}"):  # one check for them all
        raise _control_refusal({**props, SHARDING_KEY: group})
    if message_type == MessageType.FIFO:
        props[SHARDING_KEY] = group
    elif message_type == MessageType.DELAY:
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        props[Prop.TIMER_DELIVER_MS] = str(delivery_time(message, store_config, now))
    elif message_type == MessageType.TRANSACTION:
        props[Prop.TRAN_MSG] = "true"
        props[Prop.PGROUP] = grpc_producer_group(name)
        if system.HasField("orphaned_transaction_recovery_duration"):
            seconds = max(1, duration_ms(system.orphaned_transaction_recovery_duration) // 1000)
            props[Prop.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)
    born_ms = timestamp_ms(system.born_timestamp) if system.HasField("born_timestamp") else 0
    header = SendMessageHeader(producer_group=grpc_producer_group(name), topic=name, queue_id=queue_id,
                               born_timestamp=born_ms)
    return OutgoingSend(header, props, body, message_id, message_type)


def _stored_type(msg: MessageExt) -> int:
    if msg.properties.get(SHARDING_KEY):
        return MessageType.FIFO
    if msg.properties.get(Prop.TRAN_MSG, "").lower() == "true":
        return MessageType.TRANSACTION
    if msg.delay_level > 0 or msg.properties.get(Prop.REAL_TOPIC) or Prop.TIMER_DELIVER_MS in msg.properties:
        return MessageType.DELAY
    return MessageType.NORMAL


def incoming(msg: MessageExt, *, topic: str, receipt_handle: str, delivery_attempt: int,
             invisible_ms: int) -> pb.Message:
    """A stored message as a consumer receives it (the body uncompressed, with its MD5 digest)."""
    body = decompress_body(msg)
    props = msg.properties
    system = pb.SystemProperties(
        message_id=msg.client_msg_id, body_encoding=Encoding.IDENTITY,
        # MD5, upper-case hex: every official client compares it the same way (their CRC32
        # strings differ: Java does not pad to 8 digits, Python does)
        body_digest=pb.Digest(type=DigestType.MD5, checksum=_digest(DigestType.MD5, body)),
        message_type=_stored_type(msg),
        born_timestamp=to_timestamp(msg.born_timestamp), born_host=props.get(BORN_HOST) or msg.born_host[0],
        store_timestamp=to_timestamp(msg.store_timestamp), store_host=f"{msg.store_host[0]}:{msg.store_host[1]}",
        receipt_handle=receipt_handle, queue_id=msg.queue_id, queue_offset=msg.queue_offset,
        invisible_duration=to_duration(invisible_ms), delivery_attempt=delivery_attempt)
    if props.get(Prop.TAGS):
        system.tag = props[Prop.TAGS]
    if msg.keys:
        system.keys.extend(msg.keys)
    if props.get(SHARDING_KEY):
        system.message_group = props[SHARDING_KEY]
    if props.get(TRACE_CONTEXT):
        system.trace_context = props[TRACE_CONTEXT]
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES and not k.startswith("__")}
    real_topic = topic
    if real_topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        real_topic = props.get(Prop.RETRY_TOPIC, real_topic)
    return pb.Message(topic=pb.Resource(name=real_topic), user_properties=user, system_properties=system, body=body)
