"""TaskSet and run_every: the one place background tasks are started, logged and stopped."""

import asyncio
import logging

import pytest

from ferrymq.common.tasks import IdleLimit, InFlight, TaskSet, run_every, within


async def test_close_cancels_and_awaits_every_task():
    tasks = TaskSet("t")
    ended = []

    async def forever(i):
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(i)

    for i in range(3):
        tasks.spawn(forever(i))
    await asyncio.sleep(0)
    assert len(tasks) == 3
    await tasks.close()
    assert sorted(ended) == [0, 1, 2] and len(tasks) == 0


async def test_a_failed_task_is_logged_once_and_forgotten(caplog):
    tasks = TaskSet("owner-x")

    async def boom():
        raise ValueError("bad")

    with caplog.at_level(logging.ERROR):
        t = tasks.spawn(boom(), name="boom-task")
        await asyncio.gather(t, return_exceptions=True)
        await asyncio.sleep(0)
    assert len(tasks) == 0
    assert [r.getMessage() for r in caplog.records] == ["owner-x: background task boom-task failed"]


async def test_run_every_survives_failures_and_logs_once_per_streak(caplog):
    calls = []
    done = asyncio.Event()

    async def flaky():
        calls.append(1)
        if len(calls) in (1, 2, 3):
            raise OSError("disk full")
        if len(calls) == 5:
            done.set()

    with caplog.at_level(logging.INFO):
        task = asyncio.create_task(run_every(0.001, flaky))
        await asyncio.wait_for(done.wait(), 5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["periodic task flaky failed; will retry", "periodic task flaky recovered"]


async def test_quiet_errors_are_debug_only(caplog):
    done = asyncio.Event()

    async def unreachable():
        done.set()
        raise ConnectionError("no name server")

    with caplog.at_level(logging.INFO):
        task = asyncio.create_task(run_every(0.001, unreachable, quiet=(ConnectionError,)))
        await asyncio.wait_for(done.wait(), 5)
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert caplog.records == []


async def test_in_flight_wait_idle_returns_when_the_last_call_ends_or_at_the_deadline():
    in_flight = InFlight()
    assert await in_flight.wait_idle(0.01)  # nothing in progress
    release = asyncio.Event()

    async def call():
        with in_flight:
            await release.wait()

    task = asyncio.create_task(call())
    await asyncio.sleep(0)
    assert len(in_flight) == 1
    assert not await in_flight.wait_idle(0.05)  # still busy: the bounded wait gives up
    waiter = asyncio.create_task(in_flight.wait_idle(5))
    await asyncio.sleep(0)
    release.set()
    assert await waiter and len(in_flight) == 0
    await task


async def test_close_with_a_timeout_names_the_task_that_would_not_stop(caplog):
    tasks = TaskSet("owner", logging.getLogger("t"))
    finish = asyncio.Event()

    async def stubborn():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await finish.wait()  # cleans up slowly instead of stopping

    task = tasks.spawn(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING):
        await tasks.close(timeout=0.05)
    assert "owner: task stubborn did not stop within 0.05 s" in caplog.text
    finish.set()
    await task


async def test_within_keeps_a_cancellation_that_arrives_with_the_result():
    """A task stopped just as the read it waits for completes must stop (asyncio.wait_for on
    Python 3.11 hands it the result and drops the cancellation: a slave replicating a busy stream
    then never stops, and its promotion hangs)."""
    data = asyncio.get_running_loop().create_future()
    reads = []

    async def reader():
        for _ in range(3):  # a loop that would go on reading
            reads.append(await within(data, 5))

    task = asyncio.create_task(reader())
    await asyncio.sleep(0)
    data.set_result(b"record")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(task, 5)
    assert reads == []


async def test_within_times_out_and_cancels_what_it_waited_for():
    never = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await within(never, 0.05)
    assert never.cancelled()
    assert await within(asyncio.sleep(0, "done"), None) == "done"


async def test_idle_limit_fires_only_after_a_silence_as_long_as_the_limit():
    queue: asyncio.Queue[int] = asyncio.Queue()
    # An item every 20 ms for 0.8 s: longer than the 0.5 s limit, never silent for it (the margin
    # is wide so a loaded machine's scheduling stalls do not look like silence).
    items = 40

    async def feed():
        for i in range(items):
            await asyncio.sleep(0.02)
            queue.put_nowait(i)

    feeder = asyncio.create_task(feed())
    got = []
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError, match="nothing for 0.5 s"):
        async with IdleLimit(0.5, "nothing for 0.5 s") as idle:
            while True:
                got.append(await queue.get())
                idle.touch()
                last = loop.time()
    assert got == list(range(items))  # every item read: the limit ran from the last touch, not the first
    assert loop.time() - last >= 0.5
    await feeder


async def test_idle_limit_leaves_another_cancellation_a_cancellation():
    entered = asyncio.Event()

    async def reader():
        async with IdleLimit(10, "idle"):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(reader())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_idle_limit_ends_quietly_when_the_block_ends():
    async with IdleLimit(0.05, "idle") as idle:
        idle.touch()
    await asyncio.sleep(0.1)  # its timer is gone: nothing cancels this task later
    assert not asyncio.current_task().cancelling()
