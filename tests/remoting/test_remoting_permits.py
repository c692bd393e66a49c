"""The in-flight permit counter behind invoke_async and invoke_oneway."""

from __future__ import annotations

import asyncio

import pytest
from testkit.wait import wait_until

from ferrymq.remoting.permits import Permits


async def test_try_acquire_and_release() -> None:
    permits = Permits(2)
    assert permits.try_acquire() and permits.try_acquire()
    assert not permits.try_acquire()
    permits.release()
    assert permits.available == 1
    with pytest.raises(ValueError):
        Permits(0)


async def test_waiter_gets_the_released_permit_in_order() -> None:
    permits = Permits(1)
    assert permits.try_acquire()
    first = asyncio.create_task(permits.acquire(5))
    second = asyncio.create_task(permits.acquire(5))
    await wait_until(lambda: permits.waiting == 2)
    permits.release()
    assert await first is True
    assert not second.done()
    assert not permits.try_acquire()  # handed over, not returned to the pool
    permits.release()
    assert await second is True
    permits.release()
    assert permits.available == 1


async def test_acquire_times_out_and_leaves_no_waiter() -> None:
    permits = Permits(1)
    assert permits.try_acquire()
    assert await permits.acquire(0.05) is False
    assert await permits.acquire(0) is False
    permits.release()
    assert permits.available == 1  # nobody was waiting any more


async def test_cancelled_waiter_does_not_swallow_a_permit() -> None:
    permits = Permits(1)
    assert permits.try_acquire()
    waiter = asyncio.create_task(permits.acquire(5))
    await wait_until(lambda: permits.waiting == 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert permits.waiting == 0
    permits.release()
    assert permits.available == 1
