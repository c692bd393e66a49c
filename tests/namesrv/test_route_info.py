"""The name server's route table: registration, routes across brokers, expiry, removal."""

import time

from ferrymq.common.protocol import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from ferrymq.namesrv.route_info import RouteInfo


def topics(*configs, counter=1):
    return TopicConfigSerializeWrapper({c.topic_name: c for c in configs}, DataVersion(1000, counter))


def test_topic_route_lists_queues_of_every_broker_that_has_the_topic():
    routes = RouteInfo()
    routes.register_broker("c1", "h1:10911", "broker-a", 0, "h1:10912", topics(TopicConfig("T", 4, 4)))
    routes.register_broker("c1", "h2:10911", "broker-b", 0, "h2:10912", topics(TopicConfig("T", 2, 2), TopicConfig("U", 1, 1)))
    route = routes.topic_route("T")
    assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [("broker-a", 4), ("broker-b", 2)]
    assert {b.broker_name: b.broker_addrs for b in route.broker_datas} == {"broker-a": {0: "h1:10911"}, "broker-b": {0: "h2:10911"}}
    assert routes.topic_route("U").queue_datas[0].broker_name == "broker-b"
    assert routes.topic_route("nope") is None
    assert routes.cluster_info().cluster_addr_table == {"c1": ["broker-a", "broker-b"]}
    assert routes.topics_by_cluster("c1") == ["T", "U"]


def test_same_data_version_does_not_replace_queue_data_but_a_new_one_does():
    routes = RouteInfo()
    routes.register_broker("c", "h:1", "b", 0, "", topics(TopicConfig("T", 4, 4), counter=1))
    routes.register_broker("c", "h:1", "b", 0, "", topics(TopicConfig("T", 8, 8), counter=1))
    assert routes.topic_route("T").queue_datas[0].write_queue_nums == 4
    routes.register_broker("c", "h:1", "b", 0, "", topics(TopicConfig("T", 8, 8), counter=2))
    assert routes.topic_route("T").queue_datas[0].write_queue_nums == 8


def test_a_topic_the_broker_no_longer_reports_disappears():
    routes = RouteInfo()
    routes.register_broker("c", "h:1", "b", 0, "", topics(TopicConfig("T"), TopicConfig("U"), counter=1))
    routes.register_broker("c", "h:1", "b", 0, "", topics(TopicConfig("T"), counter=2))
    assert routes.topic_route("U") is None and routes.topic_route("T") is not None


def test_silent_broker_expires_and_closed_connection_removes_at_once():
    routes = RouteInfo()
    conn_a, conn_b = object(), object()
    routes.register_broker("c", "h1:1", "a", 0, "", topics(TopicConfig("T")), conn_a)
    routes.register_broker("c", "h2:1", "b", 0, "", topics(TopicConfig("T")), conn_b)
    routes.broker_live_table["h1:1"].last_update = time.monotonic() - 200
    routes.expire(120)
    assert [b.broker_name for b in routes.topic_route("T").broker_datas] == ["b"]
    routes.remove_by_connection(conn_b)
    assert routes.topic_route("T") is None
    assert routes.cluster_info().cluster_addr_table == {}


def in_epoch(epoch: int, *configs):
    return TopicConfigSerializeWrapper({c.topic_name: c for c in configs}, DataVersion(1000, 1, epoch))


def test_a_deposed_masters_late_registration_does_not_take_the_route_back():
    """Controller mode: the promoted slave registers as brokerId 0 with the new epoch; the old
    master's registration of an older epoch, arriving after (a partition healed, a request stuck
    in its socket), is ignored: producers keep the new master. A later epoch takes the id over."""
    routes = RouteInfo()
    routes.register_broker("c", "old:10911", "b", 0, "old:10912", in_epoch(1, TopicConfig("T", 4, 4)))
    routes.register_broker("c", "new:10911", "b", 1, "new:10912", in_epoch(1, TopicConfig("T", 4, 4)))
    routes.register_broker("c", "new:10911", "b", 0, "new:10912", in_epoch(2, TopicConfig("T", 4, 4)))
    assert routes.topic_route("T").broker_datas[0].broker_addrs == {0: "new:10911"}

    result = routes.register_broker("c", "old:10911", "b", 0, "old:10912", in_epoch(1, TopicConfig("T", 4, 4)))
    assert result.master_addr is None
    assert routes.topic_route("T").broker_datas[0].broker_addrs == {0: "new:10911"}
    # As a slave of the new epoch it registers again; a later epoch takes brokerId 0 back.
    routes.register_broker("c", "old:10911", "b", 1, "old:10912", in_epoch(2, TopicConfig("T", 4, 4)))
    assert routes.topic_route("T").broker_datas[0].broker_addrs == {0: "new:10911", 1: "old:10911"}
    routes.register_broker("c", "old:10911", "b", 0, "old:10912", in_epoch(3, TopicConfig("T", 4, 4)))
    assert routes.topic_route("T").broker_datas[0].broker_addrs[0] == "old:10911"


def test_brokers_without_epochs_replace_an_address_as_before():
    """Outside controller mode (stateVersion 0) a broker id at a new address (a rescheduled pod)
    replaces the old one, as it always did."""
    routes = RouteInfo()
    routes.register_broker("c", "a:1", "b", 0, "", topics(TopicConfig("T", 4, 4)))
    routes.register_broker("c", "b:1", "b", 0, "", topics(TopicConfig("T", 4, 4), counter=2))
    assert routes.topic_route("T").broker_datas[0].broker_addrs == {0: "b:1"}
