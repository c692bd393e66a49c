"""start_eagerly: a coroutine runs on the caller's stack until it first waits, then a task
finishes it, awaiting exactly what it waited for."""

import asyncio

import pytest

from ferrymq.common.eager import Parked, Resumption, start_eagerly


async def test_a_coroutine_that_never_waits_finishes_before_the_call_returns():
    done = []

    async def quick():
        done.append("ran")

    assert start_eagerly(quick()) is None
    assert done == ["ran"]  # no loop pass needed


async def test_a_coroutine_that_waits_is_finished_by_a_task_with_its_result():
    gate = asyncio.get_running_loop().create_future()
    steps = []

    async def waits():
        steps.append("before")
        value = await gate
        steps.append(f"after {value}")
        await asyncio.sleep(0)  # a bare yield is handled too
        return value * 2

    task = start_eagerly(waits())
    assert steps == ["before"] and task is not None and not task.done()
    await asyncio.sleep(0.01)
    assert not task.done()  # still waiting for the gate, not resumed early
    gate.set_result(21)
    assert await task == 42
    assert steps == ["before", "after 21"]


async def test_an_error_before_the_first_wait_reaches_the_caller_and_one_after_it_the_task():
    async def fails_at_once():
        raise ValueError("now")

    with pytest.raises(ValueError, match="now"):
        start_eagerly(fails_at_once())

    async def fails_later():
        await asyncio.sleep(0.001)
        raise KeyError("later")

    task = start_eagerly(fails_later())
    with pytest.raises(KeyError):
        await task


async def test_cancelling_the_task_cancels_the_wait_inside_the_coroutine():
    cleaned = []
    gate = asyncio.get_running_loop().create_future()

    async def waits():
        try:
            await gate
        except asyncio.CancelledError:
            cleaned.append("cancelled inside")
            raise

    task = start_eagerly(waits())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["cancelled inside"] and gate.cancelled()


async def test_after_its_first_wait_the_coroutine_runs_inside_its_task():
    seen = []

    async def looks():
        seen.append(asyncio.current_task())
        await asyncio.sleep(0.001)
        seen.append(asyncio.current_task())
        async with asyncio.timeout(1):  # needs a current task: fine once it waited
            await asyncio.sleep(0)

    task = start_eagerly(looks())
    await task
    assert seen[0] is not task and seen[1] is task


async def test_a_parked_coroutine_waits_for_its_caller_and_gets_what_was_set_meanwhile():
    tickets, steps = [], []

    async def parks(name):
        ticket = Parked()
        tickets.append(ticket)
        steps.append(f"{name} parked")
        got = await ticket
        steps.append(f"{name} got {got}")
        return got

    parked = []
    assert start_eagerly(parks("a"), parked=parked) is None
    assert start_eagerly(parks("b"), parked=parked) is None
    assert steps == ["a parked", "b parked"] and len(parked) == 2  # nothing resumed them yet
    tickets[0].result, tickets[1].error = 1, ValueError("refused")
    resumption = Resumption()
    resumption.resume(parked[0])
    assert steps[-1] == "a got 1"
    with pytest.raises(ValueError, match="refused"):  # raised in the coroutine, which did not catch it
        resumption.resume(parked[1])
    assert resumption.start() == []  # neither waits for anything


async def test_a_resumed_coroutine_that_then_waits_is_finished_by_a_task():
    gate = asyncio.get_running_loop().create_future()

    async def parks_then_waits():
        first = await Parked()
        return (first, await gate)

    parked = []
    start_eagerly(parks_then_waits(), parked=parked)
    resumption = Resumption()
    resumption.resume(parked[0])
    [task] = resumption.start()
    assert not task.done()
    gate.set_result("later")
    assert await task == (None, "later")


def _parked(*coros):
    parked = []
    for coro in coros:
        assert start_eagerly(coro, parked=parked) is None
    return parked


async def test_resumed_coroutines_that_wait_for_the_same_future_are_finished_by_one_task_in_order():
    fsync = asyncio.get_running_loop().create_future()
    other = asyncio.get_running_loop().create_future()
    answers = []

    async def send(name, waits_for):
        await Parked()
        answers.append((name, await waits_for))

    resumption = Resumption()
    for coro in _parked(send("a", fsync), send("b", fsync), send("c", other), send("d", fsync)):
        resumption.resume(coro)
    tasks = resumption.start()
    assert len(tasks) == 2  # one for the three waiting on fsync, one for c
    fsync.set_result(True)
    await asyncio.wait(tasks, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    assert answers == [("a", True), ("b", True), ("d", True)]  # c still waits, the others did not wait for it
    other.set_result("late")
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert answers[-1] == ("c", "late")


async def test_waiting_together_each_gets_the_futures_error_and_one_that_waits_again_still_finishes():
    fsync = asyncio.get_running_loop().create_future()
    later = asyncio.get_running_loop().create_future()
    seen = []

    async def catches():
        await Parked()
        try:
            await fsync
        except OSError as exc:
            seen.append(f"caught {exc}")

    async def waits_again():
        await Parked()
        try:
            await fsync
        except OSError:
            seen.append("then waits")
        seen.append(await later)

    resumption = Resumption()
    for coro in _parked(catches(), waits_again()):
        resumption.resume(coro)
    [task] = resumption.start()
    fsync.set_exception(OSError("disk gone"))
    await asyncio.sleep(0.01)
    assert seen == ["caught disk gone", "then waits"] and not task.done()  # the group task waits for it
    later.set_result("done")
    await asyncio.wait_for(task, 5)
    assert seen[-1] == "done"


async def test_coroutines_that_wait_together_twice_are_continued_together_both_times():
    # A SYNC_FLUSH send on a SYNC_MASTER: the round's fsync, then the round's replication wait.
    loop = asyncio.get_running_loop()
    fsync, replica = loop.create_future(), loop.create_future()
    answers, befores = [], []

    async def send(name):
        await Parked()
        flushed = await fsync
        answers.append((name, flushed, await replica))

    resumption = Resumption(lambda: befores.append(len(answers)))
    for coro in _parked(send("a"), send("b"), send("c")):
        resumption.resume(coro)
    [task] = resumption.start()
    fsync.set_result(True)
    await asyncio.sleep(0.01)
    assert befores == [0] and not answers and not task.done()
    replica.set_result("PUT_OK")
    await asyncio.wait_for(task, 5)
    assert answers == [("a", True, "PUT_OK"), ("b", True, "PUT_OK"), ("c", True, "PUT_OK")]
    assert befores == [0, 0]  # the answers of the second wait leave together too


async def test_cancelling_the_shared_task_cancels_every_coroutine_waiting_in_it():
    fsync = asyncio.get_running_loop().create_future()
    outcomes = []

    async def send(name):
        await Parked()
        try:
            await fsync
        except asyncio.CancelledError:
            outcomes.append(f"{name} cancelled")
            raise

    resumption = Resumption()
    for coro in _parked(send("a"), send("b")):
        resumption.resume(coro)
    [task] = resumption.start()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcomes == ["a cancelled", "b cancelled"]


async def test_parking_where_nobody_takes_parked_coroutines_is_an_error_not_a_hang():
    async def parks():
        await Parked()

    with pytest.raises(RuntimeError, match="parked"):
        start_eagerly(parks())
