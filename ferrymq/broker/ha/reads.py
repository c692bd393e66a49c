"""Reads and replication: which broker of the group a pull answer suggests next.

RocketMQ 4.9's PullMessageProcessor: with slaveReadEnable, a pull whose backlog lies beyond
accessMessageInMemoryMaxRatio of memory (the store's ``suggest_pull_from_slave``) is sent to
the group's whichBrokerWhenConsumeSlowly (1), any other to the group's brokerId (0);
without it, always to the master. A slave with reads off also suggests the master, and still
answers the pull with what it found: 4.9 sets PULL_RETRY_IMMEDIATELY there, but the status
code set right after overwrites it (so consumers keep reading from a slave whose master is
gone, as an Apache 4.9.7 slave does for the Java client).
"""

from __future__ import annotations

from ferrymq.broker.config import BrokerConfig
from ferrymq.common.protocol import MASTER_ID, SubscriptionGroupConfig
from ferrymq.store.results import GetResult


def suggest_which_broker(config: BrokerConfig, group: SubscriptionGroupConfig, result: GetResult) -> int:
    if not config.slave_read_enable:
        return MASTER_ID
    return group.which_broker_when_consume_slowly if result.suggest_pull_from_slave else group.broker_id
