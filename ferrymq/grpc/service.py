"""``apache.rocketmq.v2.MessagingService`` on FerryMQ's broker.

Producer calls go through the broker's own send processor (one path: topic checks, flow
control, sizes, delay levels, transactions); consumer calls go to the broker's POP service.
With ``traceTopicEnable`` sends, deliveries, their ends and transaction ends are reported to
``trace.py``, which writes their trace records in the background.
Every answer carries its outcome in ``Status`` (OK 20000, BAD_REQUEST 400xx, FORBIDDEN,
NOT_FOUND 404xx, TOO_MANY_REQUESTS 42900, ...); a gRPC error status is never used for a
refusal. RecallMessage goes to the broker's recall service (docs/timers.md#recall); PullMessage
and the offset calls are in ``pulling.py``. The one call FerryMQ does not serve,
SyncLiteSubscription (lite topics), answers UNSUPPORTED naming it; so do POP calls on a broker
without POP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumer_manager import ClientChannel, ConsumerManager
from ferrymq.broker.message_filter import FilterRefused, message_filter
from ferrymq.broker.pop import receipt
from ferrymq.broker.pop.admission import MAX_BATCH, MAX_INVISIBLE_MS
from ferrymq.broker.pop.outcomes import AckStatus, PopStatus
from ferrymq.broker.pop.service import PopService
from ferrymq.broker.processors.send import SendOutcome
from ferrymq.broker.recall import RecallService
from ferrymq.broker.retry import RetryService, SendBackRequest
from ferrymq.broker.subscription_group_manager import SubscriptionGroupManager
from ferrymq.broker.topic_config_manager import TopicConfigManager
from ferrymq.broker.transactions import EndTransaction, TransactionService
from ferrymq.common.consumer_protocol import build_subscription
from ferrymq.common.message import Prop, SysFlag
from ferrymq.common.message_id import decode_offset_msg_id
from ferrymq.common.protocol import BrokerData, QueueData, TopicRouteData
from ferrymq.common.recall_handle import INVALID_HANDLE, RecallHandle
from ferrymq.common.trace_data import END_TRANSACTION, PUB, TraceEvent
from ferrymq.common.validators import validate_group, validate_topic
from ferrymq.acl.plain_acl import Perm as AclPerm
from ferrymq.grpc.auth import GrpcAuth
from ferrymq.grpc.clients import GrpcClients
from ferrymq.grpc.messages import (MessageRefused, OutgoingSend, duration_ms, grpc_producer_group, incoming, outgoing,
                                   parse_transaction_id, to_timestamp, transaction_id)
from ferrymq.grpc.protocol import Code, MessageType, pb, spb, status
from ferrymq.grpc.pulling import PullOffsets
from ferrymq.grpc.routes import RouteDirectory, RouteUnavailable, assignments, message_queues
from ferrymq.grpc.send_response import SentEntry, refused, send_response, stored
from ferrymq.grpc.server import CallContext, CallEnded
from ferrymq.grpc.settings import LONG_POLLING_TIMEOUT_MS, RECEIVE_BATCH_SIZE, server_settings
from ferrymq.grpc.telemetry import TelemetrySession
from ferrymq.grpc.trace import DeliveryKey, GrpcTrace
from ferrymq.remoting.codes import CURRENT_VERSION, LanguageCode, RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import RecallMessageHeader, RecallMessageResponseHeader
from ferrymq.remoting.request_headers import SendMessageHeader
from ferrymq.store.config import StoreConfig

log = logging.getLogger(__name__)

# the broker's send path (SendProcessor.send): (request code, header, properties, body, producer
# address, when it was read) -> how it ended
SendHandler = Callable[[int, SendMessageHeader, dict, bytes, tuple[str, int], float], Awaitable[SendOutcome]]
MIN_INVISIBLE_MS = 1_000
DEFAULT_INVISIBLE_MS = 60_000  # auto_renew receives (PushConsumer) without their own duration

# remoting answer of the send path -> v2 status code
SEND_CODES = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    ResponseCode.MESSAGE_ILLEGAL: Code.MESSAGE_BODY_TOO_LARGE,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.SYSTEM_ERROR: Code.INTERNAL_SERVER_ERROR,
}
# v2 message type -> RocketMQ's MessageType in a Pub record
TRACE_MESSAGE_TYPES = {MessageType.NORMAL: "Normal", MessageType.FIFO: "Order", MessageType.DELAY: "Delay",
                       MessageType.TRANSACTION: "Trans"}
# EndTransaction's resolution -> LocalTransactionState in an EndTransaction record
TRANSACTION_STATES = {pb.TransactionResolution.COMMIT: "COMMIT_MESSAGE",
                      pb.TransactionResolution.ROLLBACK: "ROLLBACK_MESSAGE"}
# a refused receive: the POP service's remoting code -> v2 status code
REFUSED_CODES = {
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.SYSTEM_ERROR: Code.BAD_REQUEST,
}


@dataclass(frozen=True)
class Peer:
    """The remote end of a gRPC call, as the send path reads a connection's peer."""

    remote_address: tuple[str, int]
    attributes: dict

    @classmethod
    def of(cls, context: CallContext) -> "Peer":
        return cls(context.peer_address, {})


def no_pop(call: str) -> str:
    """Why a consumer call is refused on a broker without its POP service (names the call)."""
    return f"{call} is not available: this broker has no POP service"


class MessagingService:
    def __init__(self, *, config: BrokerConfig, store_config: StoreConfig, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, send: SendHandler, transactions: TransactionService,
                 retry: RetryService, pop: PopService | None, directory: RouteDirectory, clients: GrpcClients,
                 is_fifo_group: Callable[[str], bool], auth: GrpcAuth | None = None,
                 producers: ConsumerManager | None = None, recalls: RecallService | None = None,
                 pulling: PullOffsets | None = None, trace: GrpcTrace | None = None) -> None:
        self.config = config
        self.store_config = store_config
        self.topics = topics
        self.groups = groups
        self.send = send
        self.transactions = transactions
        self.retry = retry
        self.pop = pop
        self.directory = directory
        self.clients = clients
        self.is_fifo_group = is_fifo_group
        self.auth = auth  # None: ACL off
        # the broker's producer table: a 5.x producer's Telemetry stream takes transaction checks
        self.producers = producers
        self.recalls = recalls  # None: RecallMessage answers NOT_IMPLEMENTED
        self.pulling = pulling  # None: PullMessage and the offset calls answer NOT_IMPLEMENTED
        self.trace = trace  # None: traceTopicEnable off, no trace records (trace.py)
        self._sessions: dict[str, TelemetrySession] = {}  # client id -> its producer stream
        self.levels_ms = store_config.delay_level_millis()

    # ------------------------------------------------------------------ access

    def _denied(self, context, *, topic: str = "", perm: AclPerm = AclPerm.SUB, group: str = "") -> pb.Status | None:
        """With ACL on, the Status refusing this call (UNAUTHORIZED / FORBIDDEN), else None."""
        if self.auth is None:
            return None
        host = Peer.of(context).remote_address[0]
        refusal = self.auth.check(context.metadata(), host, topics={topic: perm} if topic else None, group=group)
        return None if refusal is None else status(refusal.code, refusal.message)

    # ------------------------------------------------------------------ routes

    async def _route(self, topic: str):
        route = await self.directory.route(topic)
        if route is None and self.config.auto_create_topic_enable and validate_topic(topic) is None:
            # As a 4.x producer's first send does: create the topic here from TBW102, then route to it.
            if self.topics.create_in_send(topic, "TBW102", self.config.default_topic_queue_nums) is not None:
                tc = self.topics.get(topic)
                route = TopicRouteData(
                    queue_datas=[QueueData(self.config.broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm)],
                    broker_datas=[BrokerData(self.config.broker_cluster_name, self.config.broker_name,
                                             {0: self.directory.own_remoting_address()})])
        return route

    async def QueryRoute(self, request: spb.QueryRouteRequest, context) -> spb.QueryRouteResponse:
        topic = request.topic.name
        denied = self._denied(context)
        if denied:
            return spb.QueryRouteResponse(status=denied)
        error = validate_topic(topic)
        if error:
            return spb.QueryRouteResponse(status=status(Code.ILLEGAL_TOPIC, f"topic {topic!r} is invalid: {error}"))
        try:
            route = await self._route(topic)
        except RouteUnavailable as exc:
            return spb.QueryRouteResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        if route is None:
            return spb.QueryRouteResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} not found"))
        queues = message_queues(topic, route, await self.directory.brokers(route))
        if not queues:
            return spb.QueryRouteResponse(status=status(Code.TOPIC_NOT_FOUND,
                                                        f"no broker serving gRPC has topic {topic}"))
        return spb.QueryRouteResponse(status=status(), message_queues=queues)

    async def QueryAssignment(self, request: spb.QueryAssignmentRequest, context) -> spb.QueryAssignmentResponse:
        topic, group = request.topic.name, request.group.name
        denied = self._denied(context, topic=topic, group=group)
        if denied:
            return spb.QueryAssignmentResponse(status=denied)
        error = validate_topic(topic)
        if error:
            return spb.QueryAssignmentResponse(status=status(Code.ILLEGAL_TOPIC, f"topic {topic!r} is invalid: {error}"))
        try:
            route = await self._route(topic)
        except RouteUnavailable as exc:
            return spb.QueryAssignmentResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        if route is None:
            return spb.QueryAssignmentResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} not found"))
        found = assignments(topic, route, await self.directory.brokers(route), self.is_fifo_group(group))
        return spb.QueryAssignmentResponse(status=status(), assignments=found)

    # ------------------------------------------------------------------ clients

    def _client(self, context, client_type: str = "", group: str = "",
                subscriptions: dict[str, str] | None = None, sql_topics: frozenset[str] = frozenset()) -> str:
        md = context.metadata()
        client_id = md.get("x-mq-client-id", "")
        if client_id:
            host, port = Peer.of(context).remote_address
            self.clients.seen(client_id, client_type=client_type, group=group, language=md.get("x-mq-language", ""),
                              remote=f"{host}:{port}", version=md.get("x-mq-client-version", ""),
                              subscriptions=subscriptions, sql_topics=sql_topics)
        return client_id

    async def Heartbeat(self, request: spb.HeartbeatRequest, context) -> spb.HeartbeatResponse:
        if not context.header("x-mq-client-id"):
            return spb.HeartbeatResponse(status=status(Code.CLIENT_ID_REQUIRED, "x-mq-client-id header is missing"))
        denied = self._denied(context, group=request.group.name)
        if denied:
            return spb.HeartbeatResponse(status=denied)
        client_id = self._client(context, pb.ClientType.Name(request.client_type), request.group.name)
        session = self._sessions.get(client_id)
        if session is not None and self.producers is not None:
            self._register_producer(session)
        return spb.HeartbeatResponse(status=status())

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context) -> spb.NotifyClientTerminationResponse:
        denied = self._denied(context)
        if denied:
            return spb.NotifyClientTerminationResponse(status=denied)
        client_id = context.header("x-mq-client-id")
        self.clients.gone(client_id)
        return spb.NotifyClientTerminationResponse(status=status())

    async def Telemetry(self, request_iterator, context) -> AsyncIterator[spb.TelemetryCommand]:
        """The client's settings answered at once; for a producer the stream also carries the
        broker's transaction checks (telemetry.py), so it is a producer of its topics' groups
        while it is open."""
        denied = self._denied(context)
        if denied:
            yield spb.TelemetryCommand(status=denied)
            return
        session = TelemetrySession(context.header("x-mq-client-id"), Peer.of(context).remote_address)
        reader = asyncio.ensure_future(self._read_telemetry(request_iterator, context, session))
        try:
            while (command := await session.outbox.get()) is not None:
                yield command
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            if self._sessions.get(session.client_id) is session:
                del self._sessions[session.client_id]
            if self.producers is not None:
                self.producers.unregister(session, reason="telemetry stream ended")

    async def _read_telemetry(self, request_iterator, context, session: TelemetrySession) -> None:
        try:
            async for command in request_iterator:
                kind = command.WhichOneof("command")
                if kind == "settings":
                    session.outbox.put_nowait(self._settings_answer(command.settings, context, session))
                elif kind in ("thread_stack_trace", "verify_message_result"):
                    log.debug("telemetry: %s from %s (never asked for)", kind, session)
                elif kind is None:
                    session.outbox.put_nowait(spb.TelemetryCommand(status=status(
                        Code.BAD_REQUEST, "a telemetry command carrying no command")))
                else:
                    session.outbox.put_nowait(spb.TelemetryCommand(status=status(
                        Code.NOT_IMPLEMENTED, f"telemetry command {kind} is not served by FerryMQ")))
        except CallEnded as exc:  # the client went away mid-stream
            log.debug("telemetry stream of %s ended: %s", session, exc)
        finally:
            session.close()

    def _settings_answer(self, settings: pb.Settings, context, session: TelemetrySession) -> spb.TelemetryCommand:
        group = settings.subscription.group.name if settings.HasField("subscription") else ""
        entries = settings.subscription.subscriptions if group else ()
        subscriptions = {entry.topic.name: entry.expression.expression or "*" for entry in entries} or None
        sql = frozenset(entry.topic.name for entry in entries if entry.expression.type == pb.FilterType.SQL)
        self._client(context, pb.ClientType.Name(settings.client_type), group, subscriptions, sql)
        if settings.client_type == pb.ClientType.PRODUCER and self.producers is not None and session.client_id:
            session.topics = tuple(t.name for t in settings.publishing.topics)
            self._register_producer(session)
        group_config = self.groups.get(group) if group else None
        return spb.TelemetryCommand(status=status(), settings=server_settings(
            settings, max_body_size=self.store_config.max_message_size, levels_ms=self.levels_ms,
            retry_max_times=group_config.retry_max_times if group_config else 16,
            fifo=bool(group) and self.is_fifo_group(group)))

    def _register_producer(self, session: TelemetrySession) -> None:
        """(Again: a heartbeat keeps it from expiring) a producer of each of its topics' groups."""
        for topic in session.topics:
            self.producers.register_producer(grpc_producer_group(topic), ClientChannel(
                session.client_id, session, language=LanguageCode.OTHER, version=CURRENT_VERSION))
        self._sessions[session.client_id] = session

    # ------------------------------------------------------------------ producer

    def _queue_for(self, message: pb.Message) -> int:
        group = message.system_properties.message_group
        if not group:
            return -1
        tc = self.topics.get(message.topic.name)
        # a message group always lands on one queue of this broker (FIFO within the group)
        return zlib.crc32(group.encode()) % max(1, tc.write_queue_nums if tc else 1)

    async def _send_one(self, message: pb.Message, address: tuple[str, int], client_id: str) -> SentEntry:
        started_ms = int(time.time() * 1000)
        try:
            out = outgoing(message, queue_id=self._queue_for(message), store_config=self.store_config)
        except MessageRefused as exc:
            return refused(exc.code, exc.message)
        sent = await self.send(RequestCode.SEND_MESSAGE_V2, out.header, out.properties, out.body, address,
                               time.monotonic())
        result = sent.result
        if result is None or not result.ok:
            code = SEND_CODES.get(sent.code, Code.INTERNAL_ERROR)
            if sent.code == ResponseCode.MESSAGE_ILLEGAL and "propert" in (sent.remark or "").lower():
                code = Code.MESSAGE_PROPERTIES_TOO_LARGE
            return refused(code, sent.remark or "")
        if self.trace is not None:
            self._trace_publish(message, out, result.msg_ids[0], started_ms, address, client_id)
        # a transaction's id: what EndTransaction needs to find the half message (its offsets)
        txid = (transaction_id(result.wrote_offset, result.queue_offset, out.message_id)
                if out.message_type == MessageType.TRANSACTION else "")
        return stored(out.message_id, result.queue_offset, txid, sent.recall_handle or "")

    async def SendMessage(self, request: spb.SendMessageRequest, context) -> spb.SendMessageResponse | bytes:
        """Answered serialized (send_response.py) once its messages went to the send path."""
        messages = request.messages
        if not messages:
            return spb.SendMessageResponse(status=status(Code.BAD_REQUEST, "no message to send"))
        topic = messages[0].topic.name
        if len(messages) > 1 and any(m.topic.name != topic for m in messages):
            return spb.SendMessageResponse(status=status(Code.BAD_REQUEST, "messages of one request must share a topic"))
        denied = self._denied(context, topic=topic, perm=AclPerm.PUB)
        if denied:
            return spb.SendMessageResponse(status=denied)
        address = context.peer_address
        client_id = context.header("x-mq-client-id")
        if len(messages) == 1:
            return send_response([await self._send_one(messages[0], address, client_id)])
        return send_response([await self._send_one(m, address, client_id) for m in messages])

    def _trace_publish(self, message: pb.Message, out: OutgoingSend, offset_msg_id: str, started_ms: int,
                       address: tuple[str, int], client_id: str) -> None:
        """The Pub record of a stored message (its group: the client id, v2 producers have none)."""
        host, port = address
        store_host = None
        with contextlib.suppress(ValueError):
            stored_at, stored_port, _ = decode_offset_msg_id(offset_msg_id)
            store_host = f"{stored_at}:{stored_port}"
        system = message.system_properties
        self.trace.published(TraceEvent(
            PUB, out.message_id, timestamp=started_ms, region_id=self.config.region_id,
            group=client_id or grpc_producer_group(message.topic.name), topic=message.topic.name,
            tags=system.tag or None, keys=" ".join(system.keys) or None, store_host=store_host,
            body_length=len(out.body), cost_ms=max(0, int(time.time() * 1000) - started_ms),
            msg_type=TRACE_MESSAGE_TYPES.get(out.message_type, "Normal"), offset_msg_id=offset_msg_id,
            success=True, client_host=f"{host}:{port}"), (host, port), list(system.keys))

    async def EndTransaction(self, request: spb.EndTransactionRequest, context) -> spb.EndTransactionResponse:
        denied = self._denied(context, topic=request.topic.name, perm=AclPerm.PUB)
        if denied:
            return spb.EndTransactionResponse(status=denied)
        offsets = parse_transaction_id(request.transaction_id)
        if offsets is None:
            return spb.EndTransactionResponse(status=status(Code.INVALID_TRANSACTION_ID,
                                                            f"transaction id {request.transaction_id!r} is not one "
                                                            "this broker issued"))
        kind = {pb.TransactionResolution.COMMIT: SysFlag.TRANSACTION_COMMIT_TYPE,
                pb.TransactionResolution.ROLLBACK: SysFlag.TRANSACTION_ROLLBACK_TYPE}.get(
            request.resolution, SysFlag.TRANSACTION_NOT_TYPE)
        code, remark = await self.transactions.end(EndTransaction(
            producer_group=grpc_producer_group(request.topic.name), tran_state_table_offset=offsets[1],
            commit_log_offset=offsets[0], commit_or_rollback=kind,
            from_transaction_check=request.source == pb.TransactionSource.SOURCE_SERVER_CHECK,
            msg_id=request.message_id, transaction_id=request.transaction_id))
        if code != ResponseCode.SUCCESS:
            return spb.EndTransactionResponse(status=status(Code.INVALID_TRANSACTION_ID
                                                            if "prepared" in (remark or "") or "wrong" in (remark or "")
                                                            else Code.INTERNAL_SERVER_ERROR, remark or ""))
        if self.trace is not None:
            self._trace_transaction_end(request, context)
        return spb.EndTransactionResponse(status=status())

    def _trace_transaction_end(self, request: spb.EndTransactionRequest, context) -> None:
        """The EndTransaction record, as the remoting producer's trace hook writes it."""
        self.trace.transaction_ended(TraceEvent(
            END_TRANSACTION, request.message_id, timestamp=int(time.time() * 1000), region_id=self.config.region_id,
            group=context.header("x-mq-client-id") or grpc_producer_group(request.topic.name),
            topic=request.topic.name, store_host=self.config.advertised_addr(), msg_type="Trans",
            transaction_id=request.transaction_id,
            transaction_state=TRANSACTION_STATES.get(request.resolution, "UNKNOW"),
            from_transaction_check=request.source == pb.TransactionSource.SOURCE_SERVER_CHECK),
            Peer.of(context).remote_address)

    # ------------------------------------------------------------------ consumer

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest, context) -> AsyncIterator[spb.ReceiveMessageResponse]:
        if self.pop is None:
            yield spb.ReceiveMessageResponse(status=status(Code.NOT_IMPLEMENTED, no_pop("ReceiveMessage")))
            return
        group, topic = request.group.name, request.message_queue.topic.name
        error = validate_group(group)
        if error:
            yield spb.ReceiveMessageResponse(status=status(Code.ILLEGAL_CONSUMER_GROUP,
                                                           f"consumer group {group!r} is invalid: {error}"))
            return
        denied = self._denied(context, topic=topic, group=group)
        if denied:
            yield spb.ReceiveMessageResponse(status=denied)
            return
        expression = request.filter_expression
        kind = "SQL92" if expression.type == pb.FilterType.SQL else "TAG"
        try:
            mfilter = message_filter(build_subscription(topic, expression.expression or "*", kind),
                                     self.config.enable_property_filter)
        except FilterRefused as exc:
            yield spb.ReceiveMessageResponse(status=status(Code.ILLEGAL_FILTER_EXPRESSION, exc.remark))
            return
        if request.HasField("invisible_duration"):
            invisible_ms = duration_ms(request.invisible_duration)
        else:
            invisible_ms = DEFAULT_INVISIBLE_MS if request.auto_renew else 0
        if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
            yield spb.ReceiveMessageResponse(status=status(
                Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_ms} ms is outside "
                                             f"[{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}] ms"))
            return
        poll_ms = (duration_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout")
                   else LONG_POLLING_TIMEOUT_MS)
        remaining = context.time_remaining()
        if remaining is not None:  # answer before the client's deadline, with time to deliver
            poll_ms = max(0, min(poll_ms, int(remaining * 1000) - 2_000))
        fifo = self.is_fifo_group(group)
        queue_id = request.message_queue.id if fifo and request.message_queue.id >= 0 else -1
        batch = min(request.batch_size or RECEIVE_BATCH_SIZE, MAX_BATCH)
        client_id = self._client(context, group=group, subscriptions={topic: expression.expression or "*"},
                                 sql_topics=frozenset([topic]) if kind == "SQL92" else frozenset())
        result = await self.pop.receive(group=group, topic=topic, queue_id=queue_id, max_messages=batch,
                                        invisible_ms=invisible_ms, poll_ms=poll_ms, message_filter=mfilter,
                                        fifo=fifo, client_id=client_id)
        if result.status is PopStatus.FOUND and result.messages:
            yield spb.ReceiveMessageResponse(status=status())
            yield spb.ReceiveMessageResponse(delivery_timestamp=to_timestamp(int(time.time() * 1000)))
            if self.trace is not None:
                client = Peer.of(context).remote_address
                for popped in result.messages:
                    m, handle = popped.message, receipt.decode(popped.receipt_handle, group, topic)
                    # not for a message whose TRACE_ON is false, as the clients' trace hook
                    if handle is not None and m.properties.get(Prop.TRACE_ON, "true").lower() != "false":
                        self.trace.delivered(self._delivery(group, topic, handle),
                                             msg_id=m.client_msg_id, keys=m.keys,
                                             retry_times=popped.delivery_attempt - 1,
                                             region=m.properties.get(Prop.MSG_REGION), client=client)
            for popped in result.messages:
                yield spb.ReceiveMessageResponse(message=incoming(
                    popped.message, topic=topic, receipt_handle=popped.receipt_handle,
                    delivery_attempt=popped.delivery_attempt, invisible_ms=invisible_ms))
        elif result.status in (PopStatus.FOUND, PopStatus.NO_NEW_MSG):
            yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, result.remark or "no new message"))
        elif result.status is PopStatus.POLLING_FULL:
            yield spb.ReceiveMessageResponse(status=status(Code.TOO_MANY_REQUESTS, result.remark or "polling full"))
        else:
            code = REFUSED_CODES.get(result.refused_code, Code.FORBIDDEN)
            yield spb.ReceiveMessageResponse(status=status(code, result.remark or "receive refused"))

    def _ack_status(self, ack_status: AckStatus, what: str) -> pb.Status:
        if ack_status is AckStatus.OK:
            return status()
        if ack_status is AckStatus.EXPIRED:
            return status(Code.INVALID_RECEIPT_HANDLE, f"receipt handle expired: the message was delivered again ({what})")
        return status(Code.INVALID_RECEIPT_HANDLE, f"invalid receipt handle ({what})")

    async def AckMessage(self, request: spb.AckMessageRequest, context) -> spb.AckMessageResponse:
        if self.pop is None:
            return spb.AckMessageResponse(status=status(Code.NOT_IMPLEMENTED, no_pop("AckMessage")))
        if not request.entries:
            return spb.AckMessageResponse(status=status(Code.BAD_REQUEST, "no entry to acknowledge"))
        group, topic = request.group.name, request.topic.name
        denied = self._denied(context, topic=topic, group=group)
        if denied:
            return spb.AckMessageResponse(status=denied)
        results = []
        for entry in request.entries:
            outcome = await self.pop.ack(group=group, topic=topic, receipt_handle=entry.receipt_handle)
            if outcome is AckStatus.OK:
                self._trace_end(context, group, topic, entry.receipt_handle, success=True)
            results.append(spb.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                                                     status=self._ack_status(outcome, entry.message_id)))
        codes = {r.status.code for r in results}
        overall = results[0].status if len(codes) == 1 else status(Code.MULTIPLE_RESULTS, "entries differ")
        return spb.AckMessageResponse(status=overall, entries=results)

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context) -> spb.ChangeInvisibleDurationResponse:
        if self.pop is None:
            return spb.ChangeInvisibleDurationResponse(status=status(Code.NOT_IMPLEMENTED,
                                                                     no_pop("ChangeInvisibleDuration")))
        denied = self._denied(context, topic=request.topic.name, group=request.group.name)
        if denied:
            return spb.ChangeInvisibleDurationResponse(status=denied)
        invisible_ms = duration_ms(request.invisible_duration)
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            return spb.ChangeInvisibleDurationResponse(status=status(Code.ILLEGAL_INVISIBLE_TIME,
                                                                     f"invisible duration {invisible_ms} ms"))
        outcome, handle = await self.pop.change_invisible(group=request.group.name, topic=request.topic.name,
                                                          receipt_handle=request.receipt_handle,
                                                          invisible_ms=invisible_ms)
        if outcome is not AckStatus.OK or not handle:
            return spb.ChangeInvisibleDurationResponse(status=self._ack_status(outcome, request.message_id))
        if self._is_push_consumer(context):  # a push consumer's nack: its listener failed the message
            self._trace_end(context, request.group.name, request.topic.name, request.receipt_handle, success=False)
        return spb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=handle)

    async def ForwardMessageToDeadLetterQueue(self, request: spb.ForwardMessageToDeadLetterQueueRequest,
                                              context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        reply = spb.ForwardMessageToDeadLetterQueueResponse
        if self.pop is None:
            return reply(status=status(Code.NOT_IMPLEMENTED, no_pop("ForwardMessageToDeadLetterQueue")))
        denied = self._denied(context, topic=request.topic.name, group=request.group.name)
        if denied:
            return reply(status=denied)
        group, topic = request.group.name, request.topic.name
        handle = receipt.decode(request.receipt_handle, group, topic)  # where the message is stored
        if handle is None:
            return reply(status=status(Code.INVALID_RECEIPT_HANDLE, "invalid receipt handle"))
        sent = await self.retry.send_back(SendBackRequest(group=group, offset=handle.commit_log_offset, delay_level=-1,
                                                          max_reconsume_times=None))
        if sent.code != ResponseCode.SUCCESS:
            return reply(status=status(Code.INTERNAL_SERVER_ERROR, sent.remark or "storing the dead letter failed"))
        # stored in the DLQ first, then acked: a failure between the two delivers it again rather
        # than losing it
        outcome = await self.pop.ack(group=group, topic=topic, receipt_handle=request.receipt_handle)
        if outcome is not AckStatus.OK:
            return reply(status=self._ack_status(outcome, request.message_id))
        self._trace_end(context, group, topic, request.receipt_handle, success=False)
        return reply(status=status())

    def _is_push_consumer(self, context) -> bool:
        client = self.clients.table.get(context.header("x-mq-client-id"))
        return client is not None and client.client_type == "PUSH_CONSUMER"

    def _trace_end(self, context, group: str, topic: str, receipt_handle: str, *, success: bool) -> None:
        """The SubAfter of the delivery a receipt handle names (with trace on)."""
        if self.trace is None:
            return
        handle = receipt.decode(receipt_handle, group, topic)
        if handle is not None:
            self.trace.ended(self._delivery(group, topic, handle), success=success,
                             client=Peer.of(context).remote_address)

    @staticmethod
    def _delivery(group: str, topic: str, handle: receipt.Receipt) -> DeliveryKey:
        """One delivery of a message, the same through every handle ChangeInvisibleDuration gives it."""
        return group, topic, handle.queue_id, handle.queue_offset, handle.attempt

    # ------------------------------------------------------------------ recall

    async def RecallMessage(self, request: spb.RecallMessageRequest, context) -> spb.RecallMessageResponse:
        """Apache 5.3.2's proxy: a bad topic name ILLEGAL_TOPIC, a malformed handle or any refusal
        of the broker INTERNAL_SERVER_ERROR with the broker's remark, a missing topic TOPIC_NOT_FOUND."""
        if self.recalls is None:
            return spb.RecallMessageResponse(status=status(Code.NOT_IMPLEMENTED, "RecallMessage is not available"))
        topic = request.topic.name
        error = validate_topic(topic)
        if error:
            return spb.RecallMessageResponse(status=status(Code.ILLEGAL_TOPIC, f"topic {topic!r} is invalid: {error}"))
        denied = self._denied(context, topic=topic, perm=AclPerm.PUB)
        if denied:
            return spb.RecallMessageResponse(status=denied)
        handle = RecallHandle.decode(request.recall_handle)
        if handle is None:
            return spb.RecallMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, INVALID_HANDLE))
        if handle.broker_name != self.config.broker_name:  # as Apache's proxy: to the broker the handle names
            return await self._recall_elsewhere(topic, handle.broker_name, request.recall_handle)
        outcome = await self.recalls.recall(topic, request.recall_handle, producer_group=grpc_producer_group(topic),
                                            born_host=Peer.of(context).remote_address)
        return self._recall_answer(outcome.code, outcome.remark, outcome.msg_id)

    @staticmethod
    def _recall_answer(code: int, remark: str, msg_id: str) -> spb.RecallMessageResponse:
        if code == ResponseCode.SUCCESS:
            return spb.RecallMessageResponse(status=status(), message_id=msg_id)
        grpc_code = Code.TOPIC_NOT_FOUND if code == ResponseCode.TOPIC_NOT_EXIST else Code.INTERNAL_SERVER_ERROR
        return spb.RecallMessageResponse(status=status(grpc_code, remark))

    async def _recall_elsewhere(self, topic: str, broker_name: str, handle: str) -> spb.RecallMessageResponse:
        """RECALL_MESSAGE relayed to another broker of the cluster, over the broker's own client:
        signed with innerClientAuthenticationCredentials when set (docs/timers.md#recall)."""
        request = RemotingCommand.request(RequestCode.RECALL_MESSAGE, RecallMessageHeader(
            producer_group=grpc_producer_group(topic), topic=topic, recall_handle=handle).to_ext_fields())
        try:
            answer = await self.directory.invoke_broker(topic, broker_name, request)
        except (RouteUnavailable, RemotingError, OSError, asyncio.TimeoutError) as exc:
            return self._recall_answer(ResponseCode.SYSTEM_ERROR, f"recall failed, broker {broker_name}: {exc}", "")
        if answer is None:
            return self._recall_answer(ResponseCode.SYSTEM_ERROR, "recall failed, broker service not available", "")
        return self._recall_answer(answer.code, answer.remark or "", RecallMessageResponseHeader.read(answer).msg_id or "")

    # ------------------------------------------------------------------ pull and offsets

    async def PullMessage(self, request: spb.PullMessageRequest, context) -> AsyncIterator[spb.PullMessageResponse]:
        if self.pulling is None:
            yield spb.PullMessageResponse(status=status(Code.NOT_IMPLEMENTED, "PullMessage is not available"))
            return
        denied = self._denied(context, topic=request.message_queue.topic.name, group=request.group.name)
        if denied:
            yield spb.PullMessageResponse(status=denied)
            return
        poll_ms = (duration_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout")
                   else LONG_POLLING_TIMEOUT_MS)
        remaining = context.time_remaining()
        if remaining is not None:  # answer before the client's deadline
            poll_ms = max(0, min(poll_ms, int(remaining * 1000) - 2_000))
        self._client(context, group=request.group.name)
        async for response in self.pulling.pull(request, Peer.of(context), poll_ms):
            yield response

    async def UpdateOffset(self, request: spb.UpdateOffsetRequest, context) -> spb.UpdateOffsetResponse:
        if self.pulling is None:
            return spb.UpdateOffsetResponse(status=status(Code.NOT_IMPLEMENTED, "UpdateOffset is not available"))
        denied = self._denied(context, topic=request.message_queue.topic.name, group=request.group.name)
        return spb.UpdateOffsetResponse(status=denied or self.pulling.update_offset(request))

    async def GetOffset(self, request: spb.GetOffsetRequest, context) -> spb.GetOffsetResponse:
        if self.pulling is None:
            return spb.GetOffsetResponse(status=status(Code.NOT_IMPLEMENTED, "GetOffset is not available"))
        denied = self._denied(context, topic=request.message_queue.topic.name, group=request.group.name)
        return spb.GetOffsetResponse(status=denied) if denied else self.pulling.get_offset(request)

    async def QueryOffset(self, request: spb.QueryOffsetRequest, context) -> spb.QueryOffsetResponse:
        if self.pulling is None:
            return spb.QueryOffsetResponse(status=status(Code.NOT_IMPLEMENTED, "QueryOffset is not available"))
        denied = self._denied(context, topic=request.message_queue.topic.name)
        return spb.QueryOffsetResponse(status=denied) if denied else await self.pulling.query_offset(request)

    # ------------------------------------------------------------------ not served

    async def SyncLiteSubscription(self, request, context):
        return spb.SyncLiteSubscriptionResponse(status=status(
            Code.UNSUPPORTED, "SyncLiteSubscription (lite topics) is not served by FerryMQ"))
