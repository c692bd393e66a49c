"""What a push consumer's listener gets and returns.

A listener is a plain function or a coroutine function taking ``(messages, context)``:

* concurrent: return ``ConsumeConcurrentlyStatus.RECONSUME_LATER`` (or raise) to have the
  messages redelivered later through the group's retry topic; anything else (``None``
  included) is success;
* orderly: return ``ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT`` (or raise) to see
  the same messages again, in order, after a pause; anything else is success.

Plain functions run in the consumer's thread pool, coroutines on the event loop; either
way at most ``consume_thread_max`` listener calls run at once.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Union

from ferrymq.common.message import MessageExt
from ferrymq.common.protocol import MessageQueue


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass
class ConsumeConcurrentlyContext:
    message_queue: MessageQueue
    # 0: the broker picks (3 + reconsumeTimes); > 0: that level; < 0: straight to the DLQ
    delay_level_when_next_consume: int = 0


@dataclass
class ConsumeOrderlyContext:
    message_queue: MessageQueue
    # -1: the consumer's suspend_current_queue_time_millis
    suspend_current_queue_time_millis: int = -1


Listener = Callable[[list[MessageExt], Any], Union[Any, Awaitable[Any]]]


async def call_user_code(fn: Callable, *args, executor: Executor | None = None) -> Any:
    """Await a coroutine function; run a plain one in ``executor`` (None: the loop's default
    pool) so that user code never blocks the event loop."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        return await fn(*args)
    result = await asyncio.get_running_loop().run_in_executor(executor, fn, *args)
    if inspect.isawaitable(result):
        result = await result
    return result
