"""Shared by the replication tests: a master/slave pair of FerryMQ broker processes, a TCP
proxy the test controls on 127.0.0.1 (cut, throttle, restore the replication link), and
CommitLog bytes read straight from a store directory."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import FerryProcess, free_port

SEGMENT = 1024 * 1024  # small CommitLog files: transfers cross file ends (blank tails) often


def commit_log_range(store_dir: Path, start: int, end: int, segment: int = SEGMENT) -> bytes:
    """Bytes [start, end) of the CommitLog in ``store_dir`` as its files hold them (b"" short)."""
    out = bytearray()
    offset = start
    while offset < end:
        base = offset - offset % segment
        path = store_dir / "commitlog" / f"{base:020d}"
        if not path.exists():
            break
        with open(path, "rb") as f:
            f.seek(offset - base)
            chunk = f.read(min(end, base + segment) - offset)
        if not chunk:
            break
        out += chunk
        offset += len(chunk)
    return bytes(out)


@dataclass
class BrokerPair:
    """A name server, a master and a slave under one brokerName, each its own process."""

    tmp: Path
    master_role: str = "SYNC_MASTER"
    settings: list[str] = field(default_factory=list)  # for both brokers
    namesrv_port: int = 0
    master_port: int = 0
    slave_port: int = 0
    processes: dict[str, FerryProcess] = field(default_factory=dict)

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def master_ha(self) -> str:
        return f"127.0.0.1:{self.master_port + 1}"

    @property
    def master_dir(self) -> Path:
        return self.tmp / "master"

    slave_dir_override: Path | None = None  # e.g. on a small file system

    @property
    def slave_dir(self) -> Path:
        return self.slave_dir_override or self.tmp / "slave"

    def start_namesrv(self) -> None:
        self.namesrv_port = self.namesrv_port or free_port()
        self.processes["namesrv"] = FerryProcess(["namesrv", "--port", str(self.namesrv_port)], "name server is ready",
                                                 self.tmp / f"namesrv-{time.time_ns()}.log").start()

    http_ports: dict[str, int] = field(default_factory=dict)  # broker name -> its /metrics port, when asked for

    def _broker(self, name: str, port: int, data_dir: Path, settings: list[str]) -> FerryProcess:
        args = ["broker", "--namesrv", self.namesrv, "--broker-port", str(port), "--data-dir", str(data_dir),
                "--set", "brokerName=ha-broker", "--set", "brokerClusterName=HACluster",
                "--set", f"mappedFileSizeCommitLog={SEGMENT}"]
        if name in self.http_ports:
            args += ["--http-port", str(self.http_ports[name])]
        for s in [*self.settings, *settings]:
            args += ["--set", s]
        return FerryProcess(args, "is ready on", self.tmp / f"{name}-{time.time_ns()}.log")

    def start_master(self, *settings: str) -> None:
        self.master_port = self.master_port or free_port()
        self.processes["master"] = self._broker("master", self.master_port, self.master_dir,
                                                [f"brokerRole={self.master_role}", *settings]).start()

    def start_slave(self, *settings: str) -> None:
        self.slave_port = self.slave_port or free_port()
        self.processes["slave"] = self._broker("slave", self.slave_port, self.slave_dir,
                                               ["brokerRole=SLAVE", "brokerId=1", *settings]).start()

    def logs(self) -> str:
        return "\n".join(f"--- {name} ---\n{p.log()[-6000:]}" for name, p in self.processes.items())

    def stop_all(self) -> None:
        for p in reversed(list(self.processes.values())):
            p.stop()


class TcpProxy:
    """A TCP forwarder on 127.0.0.1 the test controls: ``cut()`` stops forwarding (the
    connections stay open, a partition), ``restore()`` forwards again; ``rate`` (bytes/s,
    0 = unlimited) slows what flows from the target to the client."""

    def __init__(self, target: str, rate: int = 0) -> None:
        self.target_host, port = target.rsplit(":", 1)
        self.target_port = int(port)
        self.rate = rate
        self.port = 0
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> "TcpProxy":
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def cut(self) -> None:
        self._open.clear()

    def restore(self) -> None:
        """Forward again; connections open during the cut are closed (the peers reconnect)."""
        for w in self._writers:
            w.close()
        self._writers.clear()
        self._open.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            writer.close()
            return
        self._writers += [writer, up_writer]
        for src, dst, rate in ((reader, up_writer, 0), (up_reader, writer, self.rate)):
            task = asyncio.ensure_future(self._pump(src, dst, rate))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, rate: int) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ConnectionError):
            while True:
                data = await src.read(4096 if rate else 65536)
                if not data:
                    break
                if not self._open.is_set():
                    await self._open.wait()
                    break  # what was in flight during the cut is dropped with the connection
                dst.write(data)
                await dst.drain()
                if rate:
                    await asyncio.sleep(len(data) / rate)
        dst.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in self._writers:
            w.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class AckedLoad:
    """Sends without pause from ``loops`` concurrent loops (the producer should not retry), and
    keeps every message acknowledged SEND_OK as (its CommitLog offset, its body): what a kill
    loop must find on every broker at the end. Use as ``async with AckedLoad(producer, topic)``."""

    def __init__(self, producer, topic: str, loops: int = 4) -> None:
        self.producer, self.topic, self.loops = producer, topic, loops
        self.acked: list[tuple[int, bytes]] = []
        self._stop = asyncio.Event()
        self._counter = iter(range(10**9))
        self._tasks: list[asyncio.Task] = []

    async def _load(self) -> None:
        from ferrymq.client.errors import MQClientError
        from ferrymq.client.producer import SendStatus
        from ferrymq.common.message import Message
        from ferrymq.common.message_id import decode_offset_msg_id
        from ferrymq.remoting.errors import RemotingError

        while not self._stop.is_set():
            i = next(self._counter)
            body = f"chaos-{i}-".encode() + bytes(i % 200)
            try:
                r = await self.producer.send(Message(self.topic, body))
            except (MQClientError, OSError, RemotingError):
                await asyncio.sleep(0.05)  # pacing while a broker is down, not synchronisation
                continue
            if r.status is SendStatus.SEND_OK:
                self.acked.append((decode_offset_msg_id(r.offset_msg_id)[2], body))

    async def more(self, count: int, timeout: float, what: str) -> None:
        """Wait until ``count`` more sends than now have been acknowledged."""
        from tests.support import wait_until
        seen = len(self.acked)
        await wait_until(lambda: len(self.acked) >= seen + count, timeout, what)

    async def __aenter__(self) -> "AckedLoad":
        self._tasks = [asyncio.ensure_future(self._load()) for _ in range(self.loops)]
        return self

    async def __aexit__(self, *exc) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def assert_acked_on_both(acked: list[tuple[int, bytes]], first: Path, second: Path) -> None:
    """Every acknowledged message is in ``first``'s CommitLog where its offset says, with its body,
    and ``second`` holds the same record byte for byte."""
    from ferrymq.common.message import decode_record
    for phys, body in acked:
        size = int.from_bytes(commit_log_range(first, phys, phys + 4), "big")
        record = commit_log_range(first, phys, phys + size)
        assert len(record) == size and decode_record(record)[0].body == body, f"acknowledged message at {phys} lost"
        assert commit_log_range(second, phys, phys + size) == record, f"message at {phys} differs between brokers"
