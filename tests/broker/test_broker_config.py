"""Broker identity settings: the advertised address is never a wildcard."""

from ferrymq.broker.config import BrokerConfig, load_broker_settings


def test_advertised_host_prefers_brokerIP1_then_a_concrete_bind_host():
    assert BrokerConfig(broker_ip1="broker-0.brokers.ns.svc", listen_host="0.0.0.0").advertised_host() == "broker-0.brokers.ns.svc"
    assert BrokerConfig(listen_host="127.0.0.1").advertised_host() == "127.0.0.1"
    wildcard = BrokerConfig(listen_host="0.0.0.0").advertised_host()
    assert wildcard not in ("0.0.0.0", "", "::")


def test_broker_conf_then_set_then_flags_override_in_that_order(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=from-file\nbrokerClusterName=FileCluster\nflushDiskType=SYNC_FLUSH\n")
    broker, store = load_broker_settings(str(conf), ["brokerName=from-set"], {"listenPort": 30911})
    assert (broker.broker_name, broker.broker_cluster_name, broker.listen_port) == ("from-set", "FileCluster", 30911)
    assert store.flush_disk_type == "SYNC_FLUSH"
