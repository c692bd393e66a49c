"""What one send costs the broker's Python, measured in one process without the Java client.

Not a test. Run: .venv/bin/python bench/send_path_cost.py [--messages N] [--rounds R] [--body B]

The sweep's one-sender point (``senders1``) times a Java producer against a broker process:
the figure moves by 20-30 % between rounds on a busy host, so a change worth 5 % cannot be
seen there. This puts a name server and a broker (defaults: ASYNC_FLUSH, 1 GiB CommitLog files)
on this process's event loop and sends SEND_MESSAGE_V2 requests (JSON headers and the
properties the 4.9.7 Java client sends, ``--body`` bytes) one at a time over a real TCP
connection on 127.0.0.1 with asyncio streams, each waiting for its answer, as one sender does.
Every answer must be SUCCESS. The process's CPU time per send covers the broker's whole path
(frame, header, checks, store put, deferred ConsumeQueue and index writes, answer) plus the
client's few calls; the same client loop against a server that answers each request at once
with the broker's own answer bytes (``echo``) measures the client's part and the loop's, which
is subtracted (on the loop ``FERRYMQ_EVENT_LOOP`` chooses, as the ``ferrymq`` command's).
Rounds alternate broker and echo; the medians are printed, and the send path
in echo round trips, a figure the machine's speed moves less (it moved both by half within
an hour here).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ferrymq.broker.broker import Broker  # noqa: E402
from ferrymq.broker.config import BrokerConfig  # noqa: E402
from ferrymq.common import event_loop  # noqa: E402
from ferrymq.common.message import encode_properties  # noqa: E402
from ferrymq.namesrv.name_server import NamesrvConfig, NameServer  # noqa: E402
from ferrymq.remoting.command import FrameDecoder, RemotingCommand, encode_frame  # noqa: E402
from ferrymq.remoting.request_headers import SendMessageHeader  # noqa: E402
from ferrymq.store.config import StoreConfig  # noqa: E402

TOPIC = "SendPathCost"
QUEUES = 4
WARM_UP = 2_000
_LENGTH = struct.Struct(">I")


def send_frames(count: int, body_size: int) -> list[bytes]:
    """SEND_MESSAGE_V2 requests as the Java client sends them, queue by queue in turn."""
    props = encode_properties({"UNIQ_KEY": "7F00000100002A9F0000000000000000", "WAIT": "true", "TAGS": "TagA"})
    body = b"x" * body_size
    frames = []
    for i in range(count):
        header = SendMessageHeader(producer_group="send-path-cost", topic=TOPIC, queue_id=i % QUEUES,
                                   born_timestamp=int(time.time() * 1000), properties=props)
        request = RemotingCommand.request(310, header.to_fields())
        request.body, request.opaque = body, i + 1
        frames.append(encode_frame(request))
    return frames


async def _answer(reader: asyncio.StreamReader) -> bytes:
    """The next frame, whole (its length field included)."""
    head = await reader.readexactly(4)
    return head + await reader.readexactly(_LENGTH.unpack(head)[0])


def _code(frame: bytes) -> int:
    """The response code of a whole answer frame, decoded by the remoting codec."""
    return FrameDecoder().feed(frame)[0].code


async def one_at_a_time(port: int, frames: list[bytes]) -> tuple[float, float, bytes]:
    """Sends each frame and waits for its answer: (CPU seconds, wall seconds, last answer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        answer = b""
        cpu, wall = time.process_time(), time.perf_counter()
        for frame in frames:
            writer.write(frame)
            answer = await _answer(reader)
        return time.process_time() - cpu, time.perf_counter() - wall, answer
    finally:
        writer.close()
        await writer.wait_closed()


class _Echo(asyncio.Protocol):
    """Answers every whole request frame with one fixed answer frame."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.pending = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.pending += data
        while len(self.pending) >= 4:
            end = 4 + _LENGTH.unpack_from(self.pending)[0]
            if len(self.pending) < end:
                return
            del self.pending[:end]
            self.transport.write(self.answer)  # type: ignore[union-attr]


async def measure(messages: int, rounds: int, body: int) -> dict[str, float]:
    namesrv = NameServer(NamesrvConfig(listen_port=0))
    await namesrv.start()
    with tempfile.TemporaryDirectory(prefix="send-path-cost-") as root:
        broker = Broker(BrokerConfig(listen_port=0, namesrv_addr=namesrv.address),
                        StoreConfig(store_path_root_dir=root))
        await broker.start()
        try:
            port = broker.server.port
            frames = send_frames(WARM_UP + messages * rounds, body)
            _, _, answer = await one_at_a_time(port, frames[:WARM_UP])
            if _code(answer) != 0:
                raise SystemExit(f"the warm-up's sends were refused: {answer[:200]!r}")
            echo = await asyncio.get_running_loop().create_server(lambda: _Echo(answer), "127.0.0.1", 0)
            echo_port = echo.sockets[0].getsockname()[1]
            broker_cpu, echo_cpu, broker_wall = [], [], []
            for r in range(rounds):
                batch = frames[WARM_UP + r * messages: WARM_UP + (r + 1) * messages]
                cpu, wall, last = await one_at_a_time(port, batch)
                if _code(last) != 0:
                    raise SystemExit(f"a measured send was refused: {last[:200]!r}")
                broker_cpu.append(cpu / messages * 1e6)
                broker_wall.append(wall / messages * 1e6)
                cpu, _, _ = await one_at_a_time(echo_port, batch)
                echo_cpu.append(cpu / messages * 1e6)
                print(f"  round {r + 1}/{rounds}: broker {broker_cpu[-1]:.1f} us a send (CPU), "
                      f"echo {echo_cpu[-1]:.1f}", flush=True)
            echo.close()
        finally:
            await broker.stop()
            await namesrv.stop()
    return {"broker_cpu_us": statistics.median(broker_cpu), "echo_cpu_us": statistics.median(echo_cpu),
            "broker_wall_us": statistics.median(broker_wall),
            "send_path_us": statistics.median(b - e for b, e in zip(broker_cpu, echo_cpu)),
            "in_echoes": statistics.median((b - e) / e for b, e in zip(broker_cpu, echo_cpu))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000, help="sends per round (default 10000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each broker then echo (default 5)")
    parser.add_argument("--body", type=int, default=1024, help="body bytes (default 1024)")
    args = parser.parse_args()
    print(f"send path cost: {args.rounds} rounds of {args.messages} sends of {args.body} bytes, one at a time, "
          f"on {event_loop.chosen()}")
    figures = event_loop.run(measure(args.messages, args.rounds, args.body))
    print(f"medians: with the broker {figures['broker_cpu_us']:.1f} us CPU a send "
          f"({figures['broker_wall_us']:.1f} us wall), echo {figures['echo_cpu_us']:.1f}; "
          f"the broker's send path {figures['send_path_us']:.1f} us a send, "
          f"{figures['in_echoes']:.2f} echo round trips (the machine's speed moves both)")


if __name__ == "__main__":
    main()
