"""The header table: one typed header per request code (and per answer with fields), declared
once here and used by the client, broker, name server, controller, POP and the ACL validator
(docs/wire-format.md#typed-headers). SEND and PULL requests keep their hand-tuned codecs in
ferrymq/remoting/request_headers.py; every other header is a :class:`Header`.
"""

from __future__ import annotations

from ferrymq.common.controller_protocol import (
    CONTROLLER_ALTER_IN_SYNC,
    CONTROLLER_GET_STATE,
    CONTROLLER_HAND_OVER,
    CONTROLLER_HEARTBEAT,
    CONTROLLER_PROMOTED,
)
from ferrymq.common.transaction_batches import END_TRANSACTIONS, SEND_HALF_MESSAGES
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.headers.acl import (
    ACCESS_KEY,
    SECURITY_TOKEN,
    SIGNATURE,
    BrokerAclConfigResponseHeader,
    CreateAccessConfigHeader,
    DeleteAccessConfigHeader,
    SessionCredentialsHeader,
    UpdateGlobalWhiteAddrsHeader,
    split_list,
)
from ferrymq.remoting.headers.base import Header
from ferrymq.remoting.headers.consumer import (
    MAX_RECONSUME_TIMES_VERSION,
    ConsumerGroupHeader,
    ConsumerSendMsgBackHeader,
    ConsumeStatsHeader,
    DeleteGroupHeader,
    ResetOffsetHeader,
    UnregisterClientHeader,
)
from ferrymq.remoting.headers.controller import (
    AlterInSyncHeader,
    ControllerHandOverHeader,
    ControllerHeartbeatHeader,
    ControllerHeartbeatResponseHeader,
    ControllerPromotedHeader,
    HandOverResponseHeader,
    InSyncEpochResponseHeader,
    NotLeaderResponseHeader,
)
from ferrymq.remoting.headers.message import (
    PullMessageResponseHeader,
    RecallMessageHeader,
    RecallMessageResponseHeader,
    ReplyMessageHeader,
    SendMessageResponseHeader,
)
from ferrymq.remoting.headers.namesrv import (
    DeleteTopicFromNamesrvHeader,
    GetRouteInfoHeader,
    KVConfigHeader,
    KVConfigResponseHeader,
    KVListHeader,
    PutKVConfigHeader,
    QueryDataVersionHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerHeader,
    RegisterBrokerResponseHeader,
    TopicsByClusterHeader,
    UnregisterBrokerHeader,
)
from ferrymq.remoting.headers.pop import (
    AckMessageHeader,
    ChangeInvisibleTimeHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageHeader,
    PopMessageResponseHeader,
)
from ferrymq.remoting.headers.topic import (
    BrokerConfigResponseHeader,
    CreateTopicHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetHeader,
    QueryMessageHeader,
    QueryMessageResponseHeader,
    QueueHeader,
    SearchOffsetHeader,
    StoreTimeResponseHeader,
    TopicHeader,
    UNIQUE_KEY_QUERY,
    UpdateConsumerOffsetHeader,
    ViewMessageHeader,
)
from ferrymq.remoting.headers.transaction import CheckTransactionStateHeader, EndTransactionHeader, EndTransactionsHeader
from ferrymq.remoting.request_headers import PullMessageHeader, SendMessageHeader

R = RequestCode

# Request code -> the header its request carries (codes whose requests have no fields are absent).
REQUEST_HEADERS: dict[int, type] = {
    R.SEND_MESSAGE: SendMessageHeader, R.SEND_MESSAGE_V2: SendMessageHeader, R.SEND_BATCH_MESSAGE: SendMessageHeader,
    R.SEND_REPLY_MESSAGE: SendMessageHeader, R.SEND_REPLY_MESSAGE_V2: SendMessageHeader,
    SEND_HALF_MESSAGES: SendMessageHeader,
    R.PULL_MESSAGE: PullMessageHeader, R.LITE_PULL_MESSAGE: PullMessageHeader, R.RECALL_MESSAGE: RecallMessageHeader,
    R.PUSH_REPLY_MESSAGE_TO_CLIENT: ReplyMessageHeader,
    R.UPDATE_AND_CREATE_TOPIC: CreateTopicHeader,
    R.DELETE_TOPIC_IN_BROKER: TopicHeader, R.GET_TOPIC_STATS_INFO: TopicHeader, R.QUERY_TOPIC_CONSUME_BY_WHO: TopicHeader,
    R.GET_MAX_OFFSET: QueueHeader, R.GET_MIN_OFFSET: QueueHeader, R.GET_EARLIEST_MSG_STORETIME: QueueHeader,
    R.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetHeader,
    R.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetHeader, R.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetHeader,
    R.QUERY_MESSAGE: QueryMessageHeader, R.VIEW_MESSAGE_BY_ID: ViewMessageHeader,
    R.GET_CONSUMER_LIST_BY_GROUP: ConsumerGroupHeader, R.GET_CONSUMER_CONNECTION_LIST: ConsumerGroupHeader,
    R.NOTIFY_CONSUMER_IDS_CHANGED: ConsumerGroupHeader,
    R.GET_CONSUME_STATS: ConsumeStatsHeader, R.DELETE_SUBSCRIPTIONGROUP: DeleteGroupHeader,
    R.UNREGISTER_CLIENT: UnregisterClientHeader, R.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackHeader,
    R.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetHeader, R.RESET_CONSUMER_CLIENT_OFFSET: ResetOffsetHeader,
    R.END_TRANSACTION: EndTransactionHeader, R.CHECK_TRANSACTION_STATE: CheckTransactionStateHeader,
    END_TRANSACTIONS: EndTransactionsHeader,
    R.POP_MESSAGE: PopMessageHeader, R.ACK_MESSAGE: AckMessageHeader,
    R.CHANGE_MESSAGE_INVISIBLETIME: ChangeInvisibleTimeHeader,
    R.UPDATE_AND_CREATE_ACL_CONFIG: CreateAccessConfigHeader, R.DELETE_ACL_CONFIG: DeleteAccessConfigHeader,
    R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: UpdateGlobalWhiteAddrsHeader,
    R.REGISTER_BROKER: RegisterBrokerHeader, R.UNREGISTER_BROKER: UnregisterBrokerHeader,
    R.QUERY_DATA_VERSION: QueryDataVersionHeader, R.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoHeader,
    R.GET_TOPICS_BY_CLUSTER: TopicsByClusterHeader, R.DELETE_TOPIC_IN_NAMESRV: DeleteTopicFromNamesrvHeader,
    R.PUT_KV_CONFIG: PutKVConfigHeader, R.GET_KV_CONFIG: KVConfigHeader, R.DELETE_KV_CONFIG: KVConfigHeader,
    R.GET_KVLIST_BY_NAMESPACE: KVListHeader,
    CONTROLLER_HEARTBEAT: ControllerHeartbeatHeader, CONTROLLER_PROMOTED: ControllerPromotedHeader,
    CONTROLLER_ALTER_IN_SYNC: AlterInSyncHeader, CONTROLLER_HAND_OVER: ControllerHandOverHeader,
}  # fmt: skip

# Requests that carry no header fields (a body, or nothing at all).
FIELDLESS_REQUESTS: frozenset[int] = frozenset({
    R.HEART_BEAT, R.CHECK_CLIENT_CONFIG, R.LOCK_BATCH_MQ, R.UNLOCK_BATCH_MQ, R.GET_ALL_CONSUMER_OFFSET,
    R.GET_ALL_DELAY_OFFSET, R.GET_TIMER_CHECK_POINT, R.GET_ALL_TOPIC_CONFIG, R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, R.GET_BROKER_CONFIG, R.UPDATE_BROKER_CONFIG, R.GET_BROKER_RUNTIME_INFO,
    R.GET_BROKER_CLUSTER_ACL_INFO, R.GET_BROKER_CLUSTER_INFO, R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, R.GET_TIMER_METRICS,
    R.GET_ALL_MESSAGE_REQUEST_MODE,
    CONTROLLER_GET_STATE,
})  # fmt: skip

# Request code -> the header of its successful answer, where that has fields.
RESPONSE_HEADERS: dict[int, type[Header]] = {
    R.SEND_MESSAGE: SendMessageResponseHeader, R.SEND_MESSAGE_V2: SendMessageResponseHeader,
    R.SEND_BATCH_MESSAGE: SendMessageResponseHeader, R.SEND_REPLY_MESSAGE: SendMessageResponseHeader,
    R.SEND_REPLY_MESSAGE_V2: SendMessageResponseHeader, SEND_HALF_MESSAGES: SendMessageResponseHeader,
    R.PULL_MESSAGE: PullMessageResponseHeader, R.LITE_PULL_MESSAGE: PullMessageResponseHeader,
    R.RECALL_MESSAGE: RecallMessageResponseHeader,
    R.GET_MAX_OFFSET: OffsetResponseHeader, R.GET_MIN_OFFSET: OffsetResponseHeader,
    R.SEARCH_OFFSET_BY_TIMESTAMP: OffsetResponseHeader, R.QUERY_CONSUMER_OFFSET: OffsetResponseHeader,
    R.GET_EARLIEST_MSG_STORETIME: StoreTimeResponseHeader,
    R.QUERY_MESSAGE: QueryMessageResponseHeader, R.GET_BROKER_CONFIG: BrokerConfigResponseHeader,
    R.POP_MESSAGE: PopMessageResponseHeader, R.CHANGE_MESSAGE_INVISIBLETIME: ChangeInvisibleTimeResponseHeader,
    R.GET_BROKER_CLUSTER_ACL_INFO: BrokerAclConfigResponseHeader,
    R.REGISTER_BROKER: RegisterBrokerResponseHeader, R.QUERY_DATA_VERSION: QueryDataVersionResponseHeader,
    R.GET_KV_CONFIG: KVConfigResponseHeader,
    CONTROLLER_HEARTBEAT: ControllerHeartbeatResponseHeader, CONTROLLER_PROMOTED: InSyncEpochResponseHeader,
    CONTROLLER_ALTER_IN_SYNC: InSyncEpochResponseHeader, CONTROLLER_HAND_OVER: HandOverResponseHeader,
}  # fmt: skip

# Headers outside the code tables: what any signed request carries, and the answer any request
# to a controller that does not lead gets.
OTHER_HEADERS: tuple[type[Header], ...] = (SessionCredentialsHeader, NotLeaderResponseHeader)


def topic_field(code: int) -> str | None:
    """The wire name of the field holding the topic of a request of ``code`` (None: none)."""
    cls = REQUEST_HEADERS.get(code)
    if cls is SendMessageHeader:
        return SendMessageHeader.wire_key(code, "topic")
    fields = getattr(cls, "TOPIC_FIELDS", ())
    return fields[0] if fields else None


def consumer_group_field(code: int) -> str | None:
    """The wire name of the field holding the consumer group of a request of ``code`` (None: none)."""
    fields = getattr(REQUEST_HEADERS.get(code), "CONSUMER_GROUP_FIELDS", ())
    return fields[0] if fields else None


__all__ = [name for name in dir() if name.endswith("Header")] + [
    "ACCESS_KEY", "FIELDLESS_REQUESTS", "MAX_RECONSUME_TIMES_VERSION", "OTHER_HEADERS", "SECURITY_TOKEN",
    "SIGNATURE", "UNIQUE_KEY_QUERY", "REQUEST_HEADERS", "RESPONSE_HEADERS",
    "consumer_group_field", "split_list", "topic_field",
]  # fmt: skip
