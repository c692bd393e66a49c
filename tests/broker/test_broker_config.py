"""Broker settings: the advertised address is never a wildcard; bad values are refused at start
with one clear line; a running broker changes only the keys that take effect live."""

import re
import subprocess
import sys

import pytest

from ferrymq.broker.config import BrokerConfig, load_broker_settings
from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer
from ferrymq.common.config_loader import ConfigError
from ferrymq.common.message import Message
from testkit.ports import free_port
from testkit.processes import FerryProcess


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


# ---------------------------------------------------------------- validation (issue 16, point 5)

def run_broker_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferrymq.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("setting, message", [
    ("flushDiskType=SYNC", "flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, got 'SYNC'"),
    ("mappedFileSizeCommitLog=-5", "mappedFileSizeCommitLog must be at least 4096, got -5"),
    ("brokerPermission=7", "brokerPermission must be 2 (write), 4 (read) or 6 (read-write), got 7"),
    ("diskSpaceWarningLevelRatio=150", "diskSpaceWarningLevelRatio must be between 0 and 100, got 150"),
    ("timerRollWindowSlot=1", "timerRollWindowSlot must be at least 2, got 1"),
])
def test_a_bad_value_refuses_to_start_with_one_clear_line(tmp_path, setting, message):
    result = run_broker_cli("broker", "--broker-port", "0", "--data-dir", str(tmp_path / "store"),
                            "--namesrv", "127.0.0.1:1", "--set", setting)
    assert result.returncode != 0
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "store" / "commitlog").exists()  # refused before touching the store


def test_broker_conf_values_are_validated_as_set_values_are(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("flushDiskType=SYNC\n")
    with pytest.raises(ConfigError, match="flushDiskType must be"):
        load_broker_settings(str(conf), [])
    broker, store = load_broker_settings(None, ["mappedFileSizeConsumeQueue=110"])
    assert store.mapped_file_size_consume_queue == 120  # rounded up to whole 20-byte entries, as Java


def test_the_broker_port_comes_from_the_config_unless_the_flag_is_given(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("listenPort=30911\n")
    broker, _ = load_broker_settings(str(conf), [], {"listenPort": None})
    assert broker.listen_port == 30911


async def test_live_update_accepts_live_keys_and_refuses_the_rest_naming_them(cluster):
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin, \
            Producer("live-config", namesrv_addr=cluster.namesrv_addr) as producer:
        await admin.create_topic("live-config", broker_addr=cluster.broker_addr, read_queues=1, write_queues=1)
        assert (await producer.send(Message("live-config", b"x" * 2000))).status.name == "SEND_OK"

        # a key that needs a restart: refused, named, and nothing changed
        with pytest.raises(MQClientError, match="flushDiskType cannot change on a running broker"):
            await admin.update_broker_config(cluster.broker_addr, {"flushDiskType": "SYNC_FLUSH"})
        assert (await admin.broker_config(cluster.broker_addr))["flushDiskType"] == "ASYNC_FLUSH"
        assert (await producer.send(Message("live-config", b"x"))).status.name == "SEND_OK"

        # one bad value in a batch: the whole batch is refused
        with pytest.raises(MQClientError, match="diskSpaceWarningLevelRatio must be between 0 and 100"):
            await admin.update_broker_config(cluster.broker_addr, {"maxMessageSize": "1000",
                                                                   "diskSpaceWarningLevelRatio": "150"})
        assert (await admin.broker_config(cluster.broker_addr))["maxMessageSize"] == str(4 * 1024 * 1024)

        # a live key takes effect on the next send
        await admin.update_broker_config(cluster.broker_addr, {"maxMessageSize": "1000"})
        assert (await admin.broker_config(cluster.broker_addr))["maxMessageSize"] == "1000"
        with pytest.raises(MQClientError, match="exceeds maxMessageSize 1000"):
            await producer.send(Message("live-config", b"x" * 2000))
        assert (await producer.send(Message("live-config", b"x" * 500))).status.name == "SEND_OK"


# ---------------------------------------------------------------- a stock RocketMQ broker.conf (issue 14.5)

STOCK_4_9_BROKER_CONF = """\
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = ASYNC_FLUSH
"""


def test_a_stock_rocketmq_broker_conf_starts_with_one_warning_naming_what_is_ignored(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(STOCK_4_9_BROKER_CONF + "sendMessageThreadPoolNums = 16\nlistenPort = 0\n")
    proc = FerryProcess(["standalone", "-c", str(conf), "--namesrv-port", str(free_port()),
                         "--data-dir", str(tmp_path / "store")], "FerryMQ standalone is ready",
                        tmp_path / "standalone.log").start()
    try:
        log = proc.log()
    finally:
        proc.stop()
    warnings = [line for line in log.splitlines() if "does not implement" in line]
    assert len(warnings) == 1, log
    assert "sendMessageThreadPoolNums=16" in warnings[0]
    assert "brokerRole" not in warnings[0] and "brokerId" not in warnings[0]  # replication's keys are FerryMQ's


@pytest.mark.parametrize("setting, message", [
    ("brokerRole=SLAVE", "brokerId of a slave (brokerRole=SLAVE) must be > 0, got 0"),
    ("brokerRole=MASTER", "brokerRole must be one of ASYNC_MASTER, SYNC_MASTER, SLAVE, got 'MASTER'"),
    ("enableDLegerCommitLog=true", "enableDLegerCommitLog=true: DLedger is not implemented"),
    ("brokerRol=ASYNC_MASTER", "unknown configuration key 'brokerRol'"),  # a typo is still refused
    ('innerClientAuthenticationCredentials={"accessKey": "inner"}',
     'innerClientAuthenticationCredentials must be {"accessKey": "...", "secretKey": "..."}'),
])
def test_settings_that_would_promise_what_ferrymq_does_not_do_are_refused(setting, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_broker_settings(None, [setting])
    broker, store = load_broker_settings(None, ["useTLS=false", "brokerRole=SYNC_MASTER"])  # harmless values
    assert broker.broker_name == "broker-a"


def test_replication_roles_and_ids_go_together_as_in_rocketmq():
    broker, _ = load_broker_settings(None, ["brokerRole=SLAVE", "brokerId=2", "haMasterAddress=10.0.0.5:10912"])
    assert broker.is_slave and broker.broker_id == 2 and broker.ha_master_address == "10.0.0.5:10912"
    broker, _ = load_broker_settings(None, ["brokerRole=SYNC_MASTER", "brokerId=3"])
    assert broker.broker_id == 0  # a master is broker 0, as RocketMQ's BrokerStartup makes it
    with pytest.raises(ConfigError, match="haTransferBatchSize"):
        load_broker_settings(None, ["haTransferBatchSize=0"])
