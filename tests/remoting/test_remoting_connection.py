"""Server, client and connection behaviour over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging

import pytest
from remoting_support import ECHO, read_commands

from testkit.ports import free_port
from testkit.wait import wait_until

from ferrymq.remoting import (
    Connection,
    HeaderFieldError,
    RemotingClient,
    RemotingCommand,
    RemotingConnectionError,
    RemotingServer,
    RemotingTimeoutError,
    RemotingTooMuchRequestError,
    RequestCode,
    ResponseCode,
    SerializeType,
    encode_frame,
)

HANG = 9002  # test code whose processor never answers
FAIL = 9003
SLOW = 9004
FAST = 9005


def echo_request(n: int, serialize_type: SerializeType = SerializeType.JSON) -> RemotingCommand:
    return RemotingCommand.request(ECHO, {"n": n}, str(n).encode(), serialize_type=serialize_type)


async def hang_forever(request: RemotingCommand, connection: Connection) -> RemotingCommand:
    await asyncio.get_running_loop().create_future()
    raise AssertionError("unreachable")


async def test_echo_and_quiet_logging(server: RemotingServer, client: RemotingClient, address: str, caplog) -> None:
    caplog.set_level(logging.INFO, logger="ferrymq.remoting")
    response = await client.invoke(address, echo_request(7))
    assert (response.code, response.body, response.ext_fields) == (ResponseCode.SUCCESS, b"7", {"n": "7"})
    assert response.is_response
    assert response.version == 407
    assert not caplog.records  # nothing at INFO or above in normal operation


async def test_10000_concurrent_async_invocations(server: RemotingServer, client: RemotingClient, address: str) -> None:
    connection = await client.connection(address)
    requests = [echo_request(i) for i in range(10_000)]
    futures = [connection.invoke_async(request, timeout=60) for request in requests]
    responses = await asyncio.gather(*futures)
    assert len({request.opaque for request in requests}) == 10_000
    for i, (request, response) in enumerate(zip(requests, responses)):
        assert response.opaque == request.opaque
        assert response.body == str(i).encode()
        assert response.ext_fields == {"n": str(i)}
    assert connection.pending_requests == 0


async def test_invoke_async_callback(server: RemotingServer, client: RemotingClient, address: str) -> None:
    outcome: asyncio.Future[tuple] = asyncio.get_running_loop().create_future()
    future = client.invoke_async(address, echo_request(1), callback=lambda r, e: outcome.set_result((r, e)))
    response, error = await asyncio.wait_for(outcome, 5)
    assert error is None and response.body == b"1"
    assert (await future) is response
    # and the failure path reaches the callback too
    server.register(HANG, hang_forever)
    failed: asyncio.Future[tuple] = asyncio.get_running_loop().create_future()
    client.invoke_async(address, RemotingCommand.request(HANG), timeout=0.2, callback=lambda r, e: failed.set_result((r, e)))
    response, error = await asyncio.wait_for(failed, 5)
    assert response is None and isinstance(error, RemotingTimeoutError)


async def test_oneway_is_served_but_never_answered(server: RemotingServer, client: RemotingClient, address: str) -> None:
    seen: asyncio.Queue[RemotingCommand] = asyncio.Queue()

    async def record(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        seen.put_nowait(request)
        return request.response(remark="must not be sent")  # the connection must drop it

    server.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, record)
    # Raw socket: the only frame coming back must be the answer to the normal request.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        oneway = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g"})
        oneway.flag |= 2
        oneway.opaque = 100
        normal = echo_request(5)
        normal.opaque = 101
        writer.write(encode_frame(oneway))
        got = await asyncio.wait_for(seen.get(), 5)
        assert got.is_oneway and got.get_str("consumerGroup") == "g"
        writer.write(encode_frame(normal))
        [answer] = await read_commands(reader, 1)
        assert answer.opaque == 101 and answer.body == b"5"
    finally:
        writer.close()
    # Through the client API as well.
    await client.invoke_oneway(address, RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED))
    assert (await asyncio.wait_for(seen.get(), 5)).is_oneway
    connection = await client.connection(address)
    assert (await connection.invoke(echo_request(6))).body == b"6"
    assert connection.pending_requests == 0


async def test_timeout_leaves_the_response_table_empty(server: RemotingServer, client: RemotingClient, address: str) -> None:
    server.register(HANG, hang_forever)
    connection = await client.connection(address)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RemotingTimeoutError):
        await connection.invoke(RemotingCommand.request(HANG), timeout=0.3)
    elapsed = loop.time() - started
    assert 0.25 <= elapsed < 3.0
    assert connection.pending_requests == 0
    assert not connection.closed
    assert (await connection.invoke(echo_request(1))).body == b"1"


async def test_a_client_request_left_unanswered_closes_its_connection(
        server: RemotingServer, client: RemotingClient, address: str) -> None:
    """As Java's invokeSync does: the next request goes out on a new connection, not behind
    the unanswered one, and the server sees the old connection end."""
    server.register(HANG, hang_forever)
    first = await client.connection(address)
    await wait_until(lambda: len(server.connections) == 1)
    with pytest.raises(RemotingTimeoutError):
        await client.invoke(address, RemotingCommand.request(HANG), timeout=0.3)
    assert first.closed
    assert (await client.invoke(address, echo_request(2))).body == b"2"
    assert await client.connection(address) is not first
    await wait_until(lambda: len(server.connections) == 1)


async def test_a_request_left_unanswered_by_a_busy_peer_keeps_the_connection(
        server: RemotingServer, client: RemotingClient, address: str) -> None:
    """A peer still answering other requests is slow, not gone: the requests sharing the
    connection are not failed for one that timed out."""
    server.register(HANG, hang_forever)
    connection = await client.connection(address)

    async def answered_meanwhile():
        for i in range(10):
            await asyncio.sleep(0.05)
            assert (await client.invoke(address, echo_request(i))).body == str(i).encode()
    chatter = asyncio.create_task(answered_meanwhile())
    with pytest.raises(RemotingTimeoutError):
        await client.invoke(address, RemotingCommand.request(HANG), timeout=0.3)
    await chatter
    assert not connection.closed and await client.connection(address) is connection


async def test_cancelled_invoke_is_forgotten(server: RemotingServer, client: RemotingClient, address: str) -> None:
    server.register(HANG, hang_forever)
    connection = await client.connection(address)
    task = asyncio.create_task(connection.invoke(RemotingCommand.request(HANG), timeout=30))
    await wait_until(lambda: connection.pending_requests == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: connection.pending_requests == 0)


async def test_unknown_code_answers_3_and_keeps_serving(server: RemotingServer, client: RemotingClient, address: str) -> None:
    response = await client.invoke(address, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.remark == " request type 26 not supported"
    assert (await client.invoke(address, echo_request(2))).body == b"2"


async def test_default_processor_takes_unregistered_codes(server: RemotingServer, client: RemotingClient, address: str) -> None:
    async def admin(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        return request.response(remark=f"admin {request.code}")

    server.register_default(admin)
    assert (await client.invoke(address, RemotingCommand.request(26))).remark == "admin 26"
    assert (await client.invoke(address, echo_request(3))).body == b"3"  # dedicated one still wins


async def test_processor_errors_become_system_error(server: RemotingServer, client: RemotingClient, address: str, caplog) -> None:
    async def fail(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        if request.get_bool("field"):
            request.get_int("queueId", required=True)
        raise ValueError("disk on fire")

    server.register(FAIL, fail)
    response = await client.invoke(address, RemotingCommand.request(FAIL))
    assert response.code == ResponseCode.SYSTEM_ERROR and response.remark == "disk on fire"
    response = await client.invoke(address, RemotingCommand.request(FAIL, {"field": True}))
    assert response.code == ResponseCode.SYSTEM_ERROR and "<queueId>" in response.remark
    warnings = [r for r in caplog.records if r.name.startswith("ferrymq.remoting") and r.levelno >= logging.WARNING]
    assert len(warnings) == 2  # one per failure
    assert (await client.invoke(address, echo_request(4))).body == b"4"


async def test_slow_processor_does_not_delay_other_codes(server: RemotingServer, client: RemotingClient, address: str) -> None:
    slow_started = asyncio.Event()

    async def slow(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        slow_started.set()
        await asyncio.sleep(2)
        return request.response(remark="slow")

    async def fast(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        return request.response(remark="fast")

    server.register(SLOW, slow)
    server.register(FAST, fast)
    connection = await client.connection(address)
    loop = asyncio.get_running_loop()
    slow_call = asyncio.create_task(connection.invoke(RemotingCommand.request(SLOW), timeout=10))
    await asyncio.wait_for(slow_started.wait(), 5)
    started = loop.time()
    assert (await connection.invoke(RemotingCommand.request(FAST))).remark == "fast"
    assert loop.time() - started < 1.0
    assert not slow_call.done()
    assert (await slow_call).remark == "slow"


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ], ids=["json", "rocketmq"])
async def test_response_serialization_follows_the_request(server: RemotingServer, serialize_type: SerializeType) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(encode_frame(echo_request(9, serialize_type)))
        [response] = await read_commands(reader, 1)
        assert response.serialize_type is serialize_type
        assert response.body == b"9"
    finally:
        writer.close()


async def test_mixed_serializations_on_one_client_connection(server: RemotingServer, address: str) -> None:
    rocketmq_client = RemotingClient(serialize_type=SerializeType.ROCKETMQ)
    try:
        response = await rocketmq_client.invoke(address, echo_request(1))
        assert response.serialize_type is SerializeType.ROCKETMQ and response.body == b"1"
        connection = await rocketmq_client.connection(address)
        response = await connection.invoke(echo_request(2, SerializeType.JSON))
        assert response.serialize_type is SerializeType.JSON and response.body == b"2"
    finally:
        await rocketmq_client.close()


async def test_server_stop_fails_pending_requests_promptly(client: RemotingClient) -> None:
    server = RemotingServer()
    started = asyncio.Event()

    async def hang(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        started.set()
        return await hang_forever(request, connection)

    server.register(HANG, hang)
    await server.start()
    address = f"127.0.0.1:{server.port}"
    connection = await client.connection(address)
    call = asyncio.create_task(connection.invoke(RemotingCommand.request(HANG), timeout=60))
    await asyncio.wait_for(started.wait(), 5)
    loop = asyncio.get_running_loop()
    begin = loop.time()
    await asyncio.wait_for(server.stop(), 5)
    with pytest.raises(RemotingConnectionError):
        await asyncio.wait_for(call, 5)
    assert loop.time() - begin < 5
    assert connection.closed and connection.pending_requests == 0
    assert not server.connections
    with pytest.raises(RemotingConnectionError):
        await client.invoke(address, echo_request(1))  # nobody listens any more


async def test_local_close_fails_pending_requests(server: RemotingServer, client: RemotingClient, address: str) -> None:
    server.register(HANG, hang_forever)
    connection = await client.connection(address)
    calls = [connection.invoke_async(RemotingCommand.request(HANG), timeout=60) for _ in range(3)]
    await wait_until(lambda: connection.pending_requests == 3)
    await connection.close()
    for call in calls:
        with pytest.raises(RemotingConnectionError):
            await call
    with pytest.raises(RemotingConnectionError):
        await connection.invoke(echo_request(1))


async def test_too_many_async_requests(server: RemotingServer, address: str) -> None:
    release = asyncio.Event()

    async def held(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        await release.wait()
        return request.response()

    server.register(HANG, held)
    limited = RemotingClient(async_permits=1)
    try:
        connection = await limited.connection(address)
        first = connection.invoke_async(RemotingCommand.request(HANG), timeout=30)
        with pytest.raises(RemotingTooMuchRequestError):
            await connection.invoke_async(RemotingCommand.request(HANG), timeout=0.2)
        waiting = connection.invoke_async(echo_request(8), timeout=30)  # gets the permit once `first` ends
        release.set()
        assert (await first).code == ResponseCode.SUCCESS
        assert (await waiting).body == b"8"
    finally:
        await limited.close()


async def test_server_calls_the_client_back(server: RemotingServer) -> None:
    """A broker sends requests to its clients over the clients' own connections."""
    opened: asyncio.Queue[Connection] = asyncio.Queue()
    closed: asyncio.Queue[Connection] = asyncio.Queue()
    server.add_connection_listener(on_open=opened.put_nowait, on_close=closed.put_nowait)
    notified = asyncio.Event()

    async def client_side(request: RemotingCommand, connection: Connection) -> RemotingCommand | None:
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            notified.set()
            return None
        return request.response(body=b"running-info")

    callback_client = RemotingClient(request_handler=client_side)
    try:
        await callback_client.invoke(f"127.0.0.1:{server.port}", echo_request(1))
        broker_side = await asyncio.wait_for(opened.get(), 5)
        assert broker_side in server.connections
        assert broker_side.remote_address[0] == "127.0.0.1" and broker_side.local_address[1] == server.port
        broker_side.attributes["clientId"] = "c1"
        await broker_side.invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED))
        await asyncio.wait_for(notified.wait(), 5)
        answer = await broker_side.invoke(RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO))
        assert answer.body == b"running-info"
        # a client without a handler for a code answers "not supported"
        plain = RemotingClient()
        try:
            await plain.invoke(f"127.0.0.1:{server.port}", echo_request(2))
            other = await asyncio.wait_for(opened.get(), 5)
            answer = await other.invoke(RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO))
            assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        finally:
            await plain.close()
        assert (await asyncio.wait_for(closed.get(), 5)) is other
    finally:
        await callback_client.close()
    gone = await asyncio.wait_for(closed.get(), 5)
    assert gone is broker_side and gone.attributes["clientId"] == "c1"
    await wait_until(lambda: not server.connections)


async def test_client_shares_connect_attempts_and_reconnects(server: RemotingServer, client: RemotingClient, address: str) -> None:
    connections = await asyncio.gather(*(client.connection(address) for _ in range(20)))
    assert all(c is connections[0] for c in connections)
    await wait_until(lambda: len(server.connections) == 1)
    await connections[0].close()
    again = await client.connection(address)
    assert again is not connections[0] and not again.closed
    assert (await client.invoke(address, echo_request(3))).body == b"3"
    # the server noticed the first connection going away
    await wait_until(lambda: len(server.connections) == 1)


async def test_client_invoke_async_connects_on_demand(server: RemotingServer, client: RemotingClient, address: str) -> None:
    responses = await asyncio.gather(*(client.invoke_async(address, echo_request(i)) for i in range(5)))
    assert [r.body for r in responses] == [str(i).encode() for i in range(5)]


async def test_connect_failure_is_a_connection_error(client: RemotingClient) -> None:
    port = free_port()  # free a moment ago, nothing listens
    with pytest.raises(RemotingConnectionError):
        await client.invoke(f"127.0.0.1:{port}", echo_request(1))
    with pytest.raises(ValueError):
        await client.connection("no-port")


async def test_closed_client_refuses_work(server: RemotingServer, address: str) -> None:
    closing = RemotingClient()
    connection = await closing.connection(address)
    await closing.close()
    assert connection.closed
    with pytest.raises(RemotingConnectionError):
        await closing.invoke(address, echo_request(1))


async def test_processor_may_close_its_own_connection(server: RemotingServer, client: RemotingClient, address: str) -> None:
    async def goodbye(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        await connection.close()
        return request.response()

    server.register(FAIL, goodbye)
    connection = await client.connection(address)
    with pytest.raises(RemotingConnectionError):
        await connection.invoke(RemotingCommand.request(FAIL), timeout=5)
    await wait_until(lambda: not server.connections)


async def test_header_field_error_names_the_field() -> None:
    error = HeaderFieldError("topic")
    assert error.field == "topic" and str(error) == "the custom field <topic> is null"


async def test_late_and_stray_responses_are_dropped(server: RemotingServer, client: RemotingClient, address: str, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="ferrymq.remoting.connection")
    gate = asyncio.Event()
    answered = asyncio.Event()

    async def late(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        await gate.wait()
        answered.set()
        return request.response(remark="too late")

    server.register(SLOW, late)
    connection = await client.connection(address)
    with pytest.raises(RemotingTimeoutError):
        await connection.invoke(RemotingCommand.request(SLOW), timeout=0.2)
    gate.set()
    await asyncio.wait_for(answered.wait(), 5)
    await wait_until(lambda: any("unknown or expired opaque" in r.getMessage() for r in caplog.records))
    assert (await connection.invoke(echo_request(1))).body == b"1"

    # A response nobody asked for, sent to the server, is dropped the same way.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        stray = RemotingCommand(ResponseCode.SUCCESS, opaque=123456, flag=1)
        normal = echo_request(2)
        normal.opaque = 77
        writer.write(encode_frame(stray) + encode_frame(normal))
        [answer] = await read_commands(reader, 1)
        assert answer.opaque == 77 and answer.body == b"2"
    finally:
        writer.close()


async def test_requests_already_read_are_served_after_the_peer_hangs_up(server: RemotingServer, client: RemotingClient, address: str) -> None:
    """A oneway send written just before the sender disconnects must still be processed."""
    served: list[int] = []
    release = asyncio.Event()

    async def slow_store(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        await release.wait()  # still "writing" when the client goes away
        served.append(int(request.ext_fields["n"]))
        return request.response()

    server.register(ECHO + 1, slow_store)
    connection = await client.connection(address)
    for n in range(20):
        await connection.invoke_oneway(RemotingCommand.request(ECHO + 1, {"n": n}))
    await wait_until(lambda: len(server.connections) == 1 and len(next(iter(server.connections))._handler_tasks) == 20)
    await connection.close()
    await wait_until(lambda: not server.connections)
    release.set()
    await wait_until(lambda: len(served) == 20)
    assert sorted(served) == list(range(20))


EAGER_QUICK = 9006
EAGER_WAITS = 9007


async def test_eager_codes_are_served_in_arrival_order_whether_or_not_they_wait(
        server: RemotingServer, client: RemotingClient, address: str) -> None:
    """Sends are registered eager: one that finishes at once is answered without a task, one
    that waits (a flush, the writer thread) still gets its answer, and requests read together
    start in the order they arrived (what a pipelining producer's queue order relies on)."""
    started: list[int] = []
    gate = asyncio.Event()

    async def quick(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        started.append(int(request.ext_fields["n"]))
        return request.response(ResponseCode.SUCCESS, ext_fields={"n": request.ext_fields["n"]})

    async def waits(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        started.append(int(request.ext_fields["n"]))
        await gate.wait()
        return request.response(ResponseCode.SUCCESS, ext_fields={"n": request.ext_fields["n"]})

    server.register(EAGER_QUICK, quick, eager=True)
    server.register(EAGER_WAITS, waits, eager=True)
    connection = await client.connection(address)
    codes = [EAGER_QUICK if i % 3 else EAGER_WAITS for i in range(300)]
    futures = [connection.invoke_async(RemotingCommand.request(code, {"n": i}), timeout=10)
               for i, code in enumerate(codes)]
    await wait_until(lambda: len(started) == 300, 10, "every request started")
    assert started == list(range(300))
    # a request that waits holds up none behind it: every quick one is answered meanwhile
    quick_ones = [f for f, code in zip(futures, codes) if code == EAGER_QUICK]
    await wait_until(lambda: all(f.done() for f in quick_ones), 10, "the quick requests answered")
    assert not any(f.done() for f, code in zip(futures, codes) if code == EAGER_WAITS)
    gate.set()
    responses = await asyncio.gather(*futures)
    assert [r.ext_fields["n"] for r in responses] == [str(i) for i in range(300)]
    assert all(r.code == ResponseCode.SUCCESS for r in responses)


async def test_an_eager_processor_that_fails_answers_system_error(
        server: RemotingServer, client: RemotingClient, address: str) -> None:
    async def broken(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        raise RuntimeError("disk on fire")

    server.register(EAGER_QUICK, broken, eager=True)
    response = await client.invoke(address, RemotingCommand.request(EAGER_QUICK, {}))
    assert response.code == ResponseCode.SYSTEM_ERROR and "disk on fire" in (response.remark or "")
    # the connection is still usable
    assert (await client.invoke(address, echo_request(3))).body == b"3"
