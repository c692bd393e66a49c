"""Which broker a pull answer sends the consumer to next (RocketMQ 4.9's PullMessageProcessor),
and where FerryMQ's client pulls given that suggestion (findBrokerAddressInSubscribe)."""

import pytest

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.ha.reads import suggest_which_broker
from ferrymq.client.config import ClientConfig
from ferrymq.client.instance import ClientInstance
from ferrymq.common.protocol import SubscriptionGroupConfig
from ferrymq.store.results import GetResult, GetStatus


def result(out_of_memory: bool) -> GetResult:
    return GetResult(GetStatus.FOUND, 1, 0, 10, suggest_pull_from_slave=out_of_memory)


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SLAVE"])
def test_without_slave_reads_the_master_is_always_suggested(role):
    config = BrokerConfig(broker_role=role, broker_id=1 if role == "SLAVE" else 0)
    group = SubscriptionGroupConfig(group_name="g")
    assert suggest_which_broker(config, group, result(True)) == 0
    assert suggest_which_broker(config, group, result(False)) == 0


def test_with_slave_reads_a_backlog_out_of_memory_goes_to_the_groups_slow_broker():
    config = BrokerConfig(slave_read_enable=True)
    group = SubscriptionGroupConfig(group_name="g", which_broker_when_consume_slowly=2, broker_id=0)
    assert suggest_which_broker(config, group, result(True)) == 2
    assert suggest_which_broker(config, group, result(False)) == 0


def instance_with(addrs: dict[int, str]) -> ClientInstance:
    instance = ClientInstance(ClientConfig())
    instance.broker_addrs["b"] = addrs
    return instance


@pytest.mark.parametrize("addrs, wanted, found", [
    ({0: "m", 1: "s"}, 0, ("m", False)),
    ({0: "m", 1: "s"}, 1, ("s", True)),
    ({1: "s"}, 0, ("s", True)),  # the master is gone from the route: the slave serves
    ({0: "m"}, 1, ("m", False)),  # no such slave: the master
    ({0: "m", 2: "s2"}, 1, ("s2", True)),  # the next slave id, as the Java client
    ({}, 0, None),
])
def test_the_client_pulls_from_the_suggested_broker_or_any_of_the_group(addrs, wanted, found):
    assert instance_with(addrs).find_broker_in_subscribe("b", wanted) == found
