"""Shared by the replication tests: a TCP proxy the test controls on 127.0.0.1 (cut,
throttle, restore the replication link), a producer load that records what was acknowledged,
CommitLog bytes read straight from a store directory, and timer messages sent to a master. The master/slave pair of broker
processes is ``testkit.processes.BrokerPair``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from ferrymq.client.producer import Producer
from ferrymq.common.message import Message
from testkit.processes import SEGMENT


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
        from testkit.wait import wait_until
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


async def send_soon_and_later_timers(namesrv: str, soon_in_ms: int) -> tuple[int, int]:
    """Timer messages: 5 to TimersSoon due in ``soon_in_ms``, 3 to TimersLater due in 10 minutes
    (the topics made beforehand). Returns (soon, later), their due times in epoch ms."""
    now = int(time.time() * 1000)
    soon, later = now + soon_in_ms, now + 600_000
    async with Producer("ha-timers", namesrv_addr=namesrv) as producer:
        for i in range(5):
            await producer.send(Message("TimersSoon", b"s", properties={"TIMER_DELIVER_MS": str(soon + i)}))
        for _ in range(3):
            await producer.send(Message("TimersLater", b"l", properties={"TIMER_DELIVER_MS": str(later)}))
    return soon, later
