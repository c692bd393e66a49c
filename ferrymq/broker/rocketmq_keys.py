"""RocketMQ 4.9.7 broker.conf keys that FerryMQ does not implement.

A stock RocketMQ ``broker.conf`` must start FerryMQ: these keys (every setter of 4.9.7's
BrokerConfig, MessageStoreConfig, NettyServerConfig and NettyClientConfig, which
BrokerStartup fills from the file, minus the ones FerryMQ has) are accepted at start with
one warning naming them, never a refusal. A key in neither FerryMQ's settings nor this list
is a typo and is refused. Read off the 4.9.7 jars with ``javap`` (public ``set*`` methods).
"""

from __future__ import annotations

BROKER_CONFIG = frozenset({
    "adminBrokerThreadPoolNums", "autoDeleteUnusedStats", "brokerIP2",
    "clientManageThreadPoolNums", "clientManagerThreadPoolQueueCapacity", "commercialBaseCount",
    "commercialBigCount", "commercialEnable", "commercialTimerCount", "commercialTransCount",
    "compressedRegister", "consumerManageThreadPoolNums", "consumerManagerThreadPoolQueueCapacity",
    "enableCalcFilterBitMap", "enableDetailStat", "endTransactionPoolQueueCapacity",
    "endTransactionThreadPoolNums", "expectConsumerNumUseFilter",
    "filterDataCleanTimeSpan", "filterServerNums", "filterSupportRetry", "flushConsumerOffsetHistoryInterval",
    "forceRegister", "heartbeatThreadPoolNums", "heartbeatThreadPoolQueueCapacity", "highSpeedMode",
    "isolateLogEnable", "maxDelayTime", "maxErrorRateOfBloomFilter", "messageStorePlugIn",
    "processReplyMessageThreadPoolNums", "pullMessageThreadPoolNums",
    "pullThreadPoolQueueCapacity", "putMessageFutureThreadPoolNums", "putThreadPoolQueueCapacity",
    "queryMessageThreadPoolNums", "queryThreadPoolQueueCapacity",
    "replyThreadPoolQueueCapacity", "rocketmqHome", "sendMessageThreadPoolNums",
    "startAcceptSendRequestTimeStamp",
    "transferMsgByHeap", "waitTimeMillsInHeartbeatQueue", "waitTimeMillsInPullQueue",
    "waitTimeMillsInTransactionQueue",
})

MESSAGE_STORE_CONFIG = frozenset({
    "bitMapLengthConsumeQueueExt", "commitCommitLogLeastPages",
    "commitCommitLogThoroughInterval", "commitIntervalCommitLog", "dLegerGroup", "dLegerPeers",
    "dLegerSelfId", "debugLockEnable", "deleteCommitLogFilesInterval", "deleteConsumeQueueFilesInterval",
    "destroyMapedFileIntervalForcibly", "diskFallRecorded", "duplicationEnable", "enableBatchPush",
    "enableConsumeQueueExt", "enableDLegerCommitLog", "enableLmq", "enableMultiDispatch",
    "enableScheduleAsyncDeliver", "enableScheduleMessageStats", "fastFailIfNoBufferInStorePool",
    "flushCommitLogTimed", "flushDelayOffsetInterval", "flushLeastPagesWhenWarmMapedFile",
    "mappedFileSizeConsumeQueueExt", "maxLmqConsumeQueueNum",
    "messageIndexSafe", "offsetCheckInSlave", "preferredLeaderId",
    "putMsgIndexHightWater", "readOnlyCommitLogStorePaths", "redeleteHangedFileInterval",
    "scheduleAsyncDeliverMaxPendingLimit", "scheduleAsyncDeliverMaxResendNum2Blocked", "slaveTimeout",
    "storePathCommitLog", "storePathDLedgerCommitLog", "transientStorePoolEnable", "transientStorePoolSize",
    "useReentrantLockWhenPutMessage", "warmMapedFileEnable",
})

NETTY_SERVER_CONFIG = frozenset({
    "serverAsyncSemaphoreValue", "serverCallbackExecutorThreads",
    "serverOnewaySemaphoreValue", "serverPooledByteBufAllocatorEnable", "serverSelectorThreads",
    "serverSocketBacklog", "serverSocketRcvBufSize", "serverSocketSndBufSize", "serverWorkerThreads",
    "useEpollNativeSelector", "writeBufferHighWaterMark", "writeBufferLowWaterMark",
})

NETTY_CLIENT_CONFIG = frozenset({
    "channelNotActiveInterval", "clientAsyncSemaphoreValue", "clientCallbackExecutorThreads",
    "clientChannelMaxIdleTimeSeconds", "clientCloseSocketIfTimeout", "clientOnewaySemaphoreValue",
    "clientPooledByteBufAllocatorEnable", "clientSocketRcvBufSize", "clientSocketSndBufSize",
    "clientWorkerThreads", "connectTimeoutMillis", "writeBufferHighWaterMark",
    "writeBufferLowWaterMark",
})

NOT_IMPLEMENTED = BROKER_CONFIG | MESSAGE_STORE_CONFIG | NETTY_SERVER_CONFIG | NETTY_CLIENT_CONFIG

# Values of unimplemented keys that would change what the broker promises (security,
# filtering): ignoring them would mislead, so they are refused instead.
REFUSED_VALUES = {
    "enableDLegerCommitLog": ("true", "DLedger is not implemented"),
}


def refusal(key: str, value: str) -> str | None:
    """Why ``key=value`` cannot be accepted as merely not implemented; None if it can."""
    refused = REFUSED_VALUES.get(key)
    if refused is not None and value.strip().upper() == refused[0].upper():
        return f"{key}={value}: {refused[1]}"
    return None
