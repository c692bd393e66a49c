"""The failover decision on the Kubernetes API (issue 30, item 1), against a real kube-apiserver:

- the controller's state in a ConfigMap changes only by compare-and-swap;
- the API client's errors carry the status and the API's message, and a rotated token file is
  read again after a 401;
- two LeaseElectors: a leader cut off from the API stops leading before the standby starts, and
  the standby leads within a lease duration (plus a retry period) of the cut; a leader killed
  without releasing is replaced only after the lease ran out; a clean release hands over at once;
- two real ``ferrymq controller --state kubernetes`` processes: the one that does not lead answers
  CONTROLLER_NOT_LEADER naming the leader; a broker group (real brokers, enableControllerMode,
  controllerAddr listing both) keeps its epochs and its master when the leading controller is
  killed with SIGKILL and the other takes over.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from ferrymq.broker.ha.controller_link import ControllerLink
from ferrymq.client.producer import Producer, SendStatus
from ferrymq.common.message import Message
from ferrymq.common.controller_protocol import CONTROLLER_GET_STATE, CONTROLLER_HEARTBEAT, CONTROLLER_NOT_LEADER
from ferrymq.controller.controller import Controller, ControllerConfig
from ferrymq.controller.kube_store import ConfigMapStateStore
from ferrymq.controller.state_store import StateConflict, StateStoreError
from ferrymq.kube import CONFIG_MAPS, LEASES, Conflict, KubeApiError, KubeClient, KubeConfig, LeaseElector, NotFound
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from testkit.failover import FailoverPair, controller_state, create_topic
from testkit.ports import free_port
from testkit.processes import FerryProcess
from testkit.wait import wait_until

LEASE, RENEW, RETRY = 3.0, 2.0, 0.5  # short timings, same rules as the 15/10/2 defaults
SLACK = 1.0  # request latency on a loaded 2-core machine


def admin_client(control_plane) -> KubeClient:
    return KubeClient(KubeConfig.from_kubeconfig(control_plane.kubeconfig), timeout=5)


# ---------------------------------------------------------------------------- client and store

async def test_the_state_configmap_changes_only_by_compare_and_swap(control_plane, namespace):
    async with admin_client(control_plane) as client:
        a = ConfigMapStateStore(client, namespace, "ctl-state")
        b = ConfigMapStateStore(client, namespace, "ctl-state")
        assert await a.load() is None and await b.load() is None
        await a.save("one")  # creates it
        with pytest.raises(StateConflict, match="AlreadyExists"):
            await b.save("two")  # b read "nothing there": stale
        assert await b.load() == "one"
        await b.save("two")
        with pytest.raises(StateConflict, match="Conflict"):
            await a.save("three")  # a's resourceVersion is stale
        with pytest.raises(StateConflict):
            await a.save("three")  # and stays refused until it reads again
        assert await a.load() == "two"
        await a.save("three")
        cm = await client.get(CONFIG_MAPS, namespace, "ctl-state")
        assert cm["data"]["state.json"] == "three"

        stale = {**cm, "metadata": {**cm["metadata"], "resourceVersion": str(int(cm["metadata"]["resourceVersion"]) - 1)}}
        with pytest.raises(Conflict) as conflict:
            await client.replace(CONFIG_MAPS, namespace, "ctl-state", stale)
        assert conflict.value.status == 409 and "the object has been modified" in conflict.value.message
        with pytest.raises(NotFound) as missing:
            await client.get(LEASES, namespace, "no-such-lease")
        assert missing.value.status == 404 and "not found" in str(missing.value)

        follower = ConfigMapStateStore(client, namespace, "ctl-state", may_write=lambda: False)
        assert await follower.load() == "three"
        with pytest.raises(StateStoreError, match="does not lead"):
            await follower.save("four")
        assert (await client.get(CONFIG_MAPS, namespace, "ctl-state"))["data"]["state.json"] == "three"


async def test_a_rotated_token_file_is_read_again_after_a_401(control_plane, namespace, tmp_path):
    control_plane.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    token = control_plane.kubectl("create", "token", "reader", "-n", namespace, "--duration=1h").stdout.strip()
    token_file = tmp_path / "token"
    token_file.write_text("not-a-token")
    kubeconfig = control_plane.token_kubeconfig("unused", tmp_path / "kubeconfig")
    text = kubeconfig.read_text().replace('"token": "unused"', f'"tokenFile": "{token_file}"')
    kubeconfig.write_text(text)
    async with KubeClient(KubeConfig.from_kubeconfig(kubeconfig), timeout=5) as client:
        with pytest.raises(KubeApiError) as unauthorized:
            await client.get(LEASES, namespace, "x")
        assert unauthorized.value.status == 401
        token_file.write_text(token)  # the kubelet rotates the token in place
        # Known now (no longer 401), and without rights: a clear 403 naming the verb and resource.
        with pytest.raises(KubeApiError) as forbidden:
            await client.get(LEASES, namespace, "x")
        assert forbidden.value.status == 403 and forbidden.value.reason == "Forbidden"
        assert 'cannot get resource "leases"' in forbidden.value.message


# ---------------------------------------------------------------------------- electors

class Partition:
    """A TCP relay to the API server whose link can be cut: once cut it forwards no byte either
    way and connects nothing new, as a network partition looks from both ends."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.healed = asyncio.Event()
        self.healed.set()
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    def cut(self) -> None:
        self.healed.clear()

    async def _relay(self, reader, writer) -> None:
        self.tasks.add(asyncio.current_task())
        await self.healed.wait()
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        pumps = [asyncio.create_task(self._pump(reader, up_writer)), asyncio.create_task(self._pump(up_reader, writer))]
        self.tasks.update(pumps)
        await asyncio.gather(*pumps, return_exceptions=True)
        for w in (writer, up_writer):
            w.close()

    async def _pump(self, reader, writer) -> None:
        while data := await reader.read(65536):
            await self.healed.wait()
            writer.write(data)
            await writer.drain()

    async def stop(self) -> None:
        self.server.close()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class Timeline:
    """Leadership starts and stops of named electors, with the local monotonic time, and every
    moment two led at once."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, str]] = []
        self.electors: dict[str, LeaseElector] = {}
        self.overlaps: list[str] = []
        self.started: dict[str, asyncio.Event] = {}

    def elector(self, client: KubeClient, namespace: str, identity: str, **kw) -> LeaseElector:
        e = LeaseElector(client, namespace, "leader", identity, lease_duration=kw.pop("lease", LEASE),
                         renew_deadline=kw.pop("renew", RENEW), retry_period=RETRY,
                         on_started_leading=lambda: self._on(identity, "start"),
                         on_stopped_leading=lambda: self._on(identity, "stop"), **kw)
        self.electors[identity] = e
        self.started[identity] = asyncio.Event()
        return e

    def _on(self, who: str, what: str) -> None:
        self.events.append((time.monotonic(), who, what))
        if what == "start":
            self.started[who].set()
            others = [n for n, e in self.electors.items() if n != who and e.is_leader]
            if others:
                self.overlaps.append(f"{who} started leading while {others} led")

    def at(self, who: str, what: str) -> float:
        return next(t for t, w, e in self.events if (w, e) == (who, what))


async def wait_event(event: asyncio.Event, timeout: float, what: str) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}") from None


async def test_a_leader_cut_off_from_the_api_stops_before_the_standby_leads(control_plane, namespace):
    partition = Partition(control_plane.api_port)
    port = await partition.start()
    cfg = KubeConfig.from_kubeconfig(control_plane.kubeconfig)
    cut_cfg = KubeConfig(f"https://127.0.0.1:{port}", ca_file=cfg.ca_file, client_cert=cfg.client_cert,
                         client_key=cfg.client_key)
    timeline = Timeline()
    async with KubeClient(cut_cfg, timeout=2) as a_client, admin_client(control_plane) as b_client:
        a = timeline.elector(a_client, namespace, "a")
        b = timeline.elector(b_client, namespace, "b")
        a_task = asyncio.create_task(a.run())
        await wait_event(timeline.started["a"], 10, "a leading")
        b_task = asyncio.create_task(b.run())
        await wait_until(lambda: b.holder == "a", 10, "b seeing a as the holder")
        assert not b.is_leader

        partition.cut()
        cut = time.monotonic()
        await wait_event(timeline.started["b"], LEASE + RETRY * 1.2 + SLACK + 5, "b leading")
        a_stopped, b_started = timeline.at("a", "stop"), timeline.at("b", "start")
        assert a_stopped < b_started, timeline.events
        assert a_stopped - cut <= RENEW + 0.5, f"a led {a_stopped - cut:.2f} s after the cut (renew deadline {RENEW})"
        assert b_started - cut <= LEASE + RETRY * 1.2 + SLACK, f"b led {b_started - cut:.2f} s after the cut"
        assert not a.is_leader and b.is_leader and not timeline.overlaps
        lease = await b_client.get(LEASES, namespace, "leader")
        assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
        for t in (a_task, b_task):
            t.cancel()
        await asyncio.gather(a_task, b_task, return_exceptions=True)
    await partition.stop()


async def test_a_leader_killed_without_release_is_replaced_once_its_lease_ran_out(control_plane, namespace):
    timeline = Timeline()
    async with admin_client(control_plane) as a_client, admin_client(control_plane) as b_client:
        a = timeline.elector(a_client, namespace, "a", release_on_cancel=False)
        b = timeline.elector(b_client, namespace, "b")
        a_task = asyncio.create_task(a.run())
        await wait_event(timeline.started["a"], 10, "a leading")
        b_task = asyncio.create_task(b.run())
        await wait_until(lambda: b.holder == "a", 10, "b seeing a as the holder")
        a_task.cancel()  # a crash: the Lease keeps naming a
        await asyncio.gather(a_task, return_exceptions=True)
        killed = time.monotonic()
        assert (await b_client.get(LEASES, namespace, "leader"))["spec"]["holderIdentity"] == "a"
        await wait_event(timeline.started["b"], LEASE + RETRY * 1.2 + SLACK + 5, "b leading")
        took = timeline.at("b", "start") - killed
        # not before a's last renewal had aged a lease duration (it renewed at most a retry before the kill)
        assert LEASE - RETRY - SLACK <= took <= LEASE + RETRY * 1.2 + SLACK, f"b led {took:.2f} s after the kill"
        assert not timeline.overlaps
        b_task.cancel()
        await asyncio.gather(b_task, return_exceptions=True)


async def test_a_clean_release_hands_over_at_once(control_plane, namespace):
    timeline = Timeline()
    lease, renew = 20.0, 12.0  # long: a hand-over by expiry could not pass this test
    async with admin_client(control_plane) as a_client, admin_client(control_plane) as b_client:
        a = timeline.elector(a_client, namespace, "a", lease=lease, renew=renew)
        b = timeline.elector(b_client, namespace, "b", lease=lease, renew=renew)
        a_task = asyncio.create_task(a.run())
        await wait_event(timeline.started["a"], 10, "a leading")
        b_task = asyncio.create_task(b.run())
        await wait_until(lambda: b.holder == "a", 10, "b seeing a as the holder")
        a_task.cancel()  # a clean shutdown releases the Lease
        await asyncio.gather(a_task, return_exceptions=True)
        released = time.monotonic()
        await wait_event(timeline.started["b"], 10, "b leading")
        assert timeline.at("b", "start") - released <= RETRY * 1.2 + SLACK
        assert timeline.at("a", "stop") < timeline.at("b", "start") and not timeline.overlaps
        b_task.cancel()
        await asyncio.gather(b_task, return_exceptions=True)
        # b released it too
        assert (await b_client.get(LEASES, namespace, "leader"))["spec"].get("holderIdentity", "") == ""


# ---------------------------------------------------------------------------- controller processes

async def ask(addr: str, timeout: float = 3) -> RemotingCommand:
    client = RemotingClient(connect_timeout=1)
    try:
        return await client.invoke(addr, RemotingCommand.request(CONTROLLER_GET_STATE), timeout)
    finally:
        await client.close()


async def leads(addr: str) -> bool:
    try:
        return (await ask(addr)).code == ResponseCode.SUCCESS
    except Exception:  # noqa: BLE001 - not up, or not answering yet
        return False


TOPIC = "ReplicatedControllerTopic"


def heartbeat(group: str, broker_id: int = 0) -> RemotingCommand:
    return RemotingCommand.request(CONTROLLER_HEARTBEAT, {
        "clusterName": "C", "brokerName": group, "brokerId": broker_id, "brokerAddr": f"127.0.0.1:{20000 + broker_id}",
        "haServerAddr": f"127.0.0.1:{20001 + broker_id}", "epoch": 0, "maxOffset": 0, "confirmedOffset": 0,
        "acting": "NONE"})


async def test_a_controller_whose_write_conflicts_steps_down_and_reads_the_state_again(control_plane, namespace):
    """Another writer (a deposed leader) changes the state ConfigMap behind the leader's back:
    the leader's next write loses its compare-and-swap, the broker is refused, and the controller
    stops leading; when it leads again it has read the state afresh (the other writer's group
    is there, the refused one is not)."""
    async with admin_client(control_plane) as client:
        elector = LeaseElector(client, namespace, "ctl-lease", "solo", lease_duration=LEASE, renew_deadline=RENEW,
                               retry_period=RETRY)
        store = ConfigMapStateStore(client, namespace, "ctl-state", may_write=lambda: elector.is_leader)
        controller = Controller(ControllerConfig(listen_port=0, failover_timeout=1000), store, elector)
        stops = []
        await controller.start()
        remoting = RemotingClient()
        try:
            addr = controller.address
            await wait_until(lambda: leads(addr), 10, "the controller leading")
            first = await remoting.invoke(addr, heartbeat("g1"), 5)
            assert (first.code, first.ext_fields["role"], first.ext_fields["epoch"]) == (ResponseCode.SUCCESS, "MASTER", "1")

            cm = await client.get(CONFIG_MAPS, namespace, "ctl-state")
            doc = json.loads(cm["data"]["state.json"])
            assert [h["epoch"] for h in doc["groups"]["g1"]["history"]] == [1]
            doc["groups"]["other"] = {"cluster": "C", "history": [{"epoch": 7, "startOffset": 0, "masterId": 0}],
                                      "mustReach": 0}
            await client.replace(CONFIG_MAPS, namespace, "ctl-state",
                                 {**cm, "data": {"state.json": json.dumps(doc)}})

            controllers_own = elector.on_stopped_leading

            def record_stop() -> None:
                stops.append(time.monotonic())
                controllers_own()
            elector.on_stopped_leading = record_stop
            refused = await remoting.invoke(addr, heartbeat("g2"), 5)
            assert refused.code != ResponseCode.SUCCESS and "changed by another writer" in (refused.remark or "")
            assert stops and not controller.leading

            async def state_again():
                answer = await ask(addr)
                return json.loads(answer.body)["groups"] if answer.code == ResponseCode.SUCCESS else None
            groups = await wait_until(state_again, 10, "the controller leading again")
            assert set(groups) == {"g1", "other"} and groups["other"]["epoch"] == 7
        finally:
            await remoting.close()
            await controller.stop()
        lease = await client.get(LEASES, namespace, "ctl-lease")
        assert lease["spec"].get("holderIdentity", "") == ""  # released on stop
        assert lease["metadata"]["annotations"]["ferrymq.io/controller-address"] == addr


class ReplicatedControllerPair(FailoverPair):
    """The failover pair of brokers with controllerAddr listing two controller replicas."""

    controllers: list[str] | None = None

    def _member(self, broker_id: int) -> list[str]:
        return [f"brokerRole={self.master_role}", f"brokerId={broker_id}", "enableControllerMode=true",
                f"controllerAddr={';'.join(self.controllers)}", "controllerHeartbeatInterval=300"]


def controller_replica(control_plane, namespace: str, tmp_path, identity: str, port: int) -> FerryProcess:
    return FerryProcess(
        ["controller", "--port", str(port), "--failover-timeout", "3000", "--state", "kubernetes",
         "--kubeconfig", str(control_plane.kubeconfig), "--namespace", namespace, "--identity", identity,
         "--state-name", "ctl-state", "--lease-name", "ctl-lease", "--lease-duration", str(LEASE),
         "--renew-deadline", str(RENEW), "--retry-period", str(RETRY)],
        "controller is ready", tmp_path / f"{identity}.log")


def test_two_controller_replicas_the_group_keeps_its_epochs_when_the_leader_is_killed(control_plane, namespace,
                                                                                       tmp_path):
    ports = {"c1": free_port(), "c2": free_port()}
    addrs = {n: f"127.0.0.1:{p}" for n, p in ports.items()}
    procs = {"c1": controller_replica(control_plane, namespace, tmp_path, "c1", ports["c1"]).start()}
    pair = ReplicatedControllerPair(tmp_path, "SYNC_MASTER", ["syncFlushTimeout=2000"], failover_timeout=3000)
    pair.controllers = [addrs["c1"], addrs["c2"]]

    async def scenario():
        await wait_until(lambda: leads(addrs["c1"]), 15, "c1 leading")
        procs["c2"] = await asyncio.to_thread(
            controller_replica(control_plane, namespace, tmp_path, "c2", ports["c2"]).start)

        async def names_the_leader():
            answer = await ask(addrs["c2"])
            return answer if answer.code == CONTROLLER_NOT_LEADER and answer.ext_fields.get("leaderAddr") else None
        refusal = await wait_until(names_the_leader, 10, "c2 answering CONTROLLER_NOT_LEADER with the leader")
        assert refusal.ext_fields["leaderAddr"] == addrs["c1"]

        # ControllerLink, asked c2 first, follows the name to c1
        client = RemotingClient(connect_timeout=1)
        try:
            link = ControllerLink([addrs["c2"], addrs["c1"]], client)
            assert (await link.invoke(RemotingCommand.request(CONTROLLER_GET_STATE), 3)).code == ResponseCode.SUCCESS
            assert link.current == addrs["c1"]
        finally:
            await client.close()

        await asyncio.to_thread(pair.start_namesrv)
        await asyncio.to_thread(pair.start_master)
        await asyncio.to_thread(pair.start_slave)

        async def group_formed():
            state = await controller_state(addrs["c1"])
            acting = {b["brokerId"]: (b["acting"], b["epoch"]) for b in state.get("brokers", [])}
            return state if state.get("masterId") == 0 and acting == {0: ("MASTER", 1), 1: ("SLAVE", 1)} else None
        before = await wait_until(group_formed, 60, "broker 0 master of epoch 1, broker 1 its slave")

        await create_topic(pair.namesrv, TOPIC)
        producer = Producer("replicated-controller", namesrv_addr=pair.namesrv, send_timeout=5, retry_times=0)
        await producer.start()
        try:
            procs["c1"].kill()  # SIGKILL: the Lease still names c1 until it runs out
            killed = time.monotonic()
            await wait_until(lambda: leads(addrs["c2"]), LEASE + RETRY * 1.2 + SLACK + 10, "c2 leading")
            took_over = time.monotonic() - killed

            async def brokers_back():
                state = await controller_state(addrs["c2"])
                acting = {b["brokerId"]: (b["acting"], b["epoch"]) for b in state.get("brokers", [])}
                return state if acting == {0: ("MASTER", 1), 1: ("SLAVE", 1)} else None
            after = await wait_until(brokers_back, 30, "both brokers heartbeating c2 in their roles")
            # the new leader read the epochs; and elected nobody (the master never stopped)
            assert after["history"] == before["history"] and (after["masterId"], after["epoch"]) == (0, 1)
            sent = await producer.send(Message(TOPIC, b"after the controller's failover"))
            assert sent.status is SendStatus.SEND_OK
            # For a failover timeout after c2 took over nobody is elected (the master is alive, and
            # a new leader waits that long before it replaces anyone): watched, not slept through.
            window_end = killed + took_over + 3.5
            while time.monotonic() < window_end:
                state = await controller_state(addrs["c2"])
                assert (state["masterId"], state["epoch"], state["history"]) == (0, 1, before["history"])
                await asyncio.sleep(0.3)
        finally:
            await producer.close()

    try:
        asyncio.run(scenario())
    except BaseException:
        print(pair.logs())
        for name, p in procs.items():
            print(f"--- {name} ---\n{p.log()[-6000:]}")
        raise
    finally:
        pair.stop_all()
        for p in procs.values():
            p.stop()
