"""The send side of RocketMQ 5 timers (docs/timers.md#what-a-client-sends): which messages ask
for a delivery time, which are refused, and how the rest wait under the timer topic.

Pure: no I/O, the clock is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.common.message import MessageExt, Prop, SysFlag
from ferrymq.common.protocol import TIMER_TOPIC
from ferrymq.remoting.codes import ResponseCode
from ferrymq.store.config import StoreConfig

# What a client may set (the delivered message keeps it, and TIMER_OUT_MS, as Apache 5's does).
TIMER_REQUEST_PROPS = (Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS, Prop.TIMER_DELIVER_MS)


@dataclass(frozen=True)
class TimerRefusal:
    code: int
    remark: str


def asks_for_timer(msg: MessageExt) -> bool:
    """A message the timer applies to (Apache's HookUtils): not a half or rollback record, not
    already under the timer topic or being delivered by it. A delay level wins: its timer
    properties are dropped."""
    if SysFlag.transaction_type(msg.sys_flag) not in (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE):
        return False
    if msg.delay_level > 0:
        for name in TIMER_REQUEST_PROPS:
            msg.properties.pop(name, None)
        return False
    if msg.topic == TIMER_TOPIC or Prop.TIMER_OUT_MS in msg.properties:
        return False
    return any(name in msg.properties for name in TIMER_REQUEST_PROPS)


def deliver_time(props: dict[str, str], now_ms: int) -> int | None:
    """The absolute delivery time a message asks for (TIMER_DELAY_SEC, then TIMER_DELAY_MS, then
    TIMER_DELIVER_MS), or None if the value does not parse."""
    try:
        if Prop.TIMER_DELAY_SEC in props:
            return now_ms + int(props[Prop.TIMER_DELAY_SEC]) * 1000
        if Prop.TIMER_DELAY_MS in props:
            return now_ms + int(props[Prop.TIMER_DELAY_MS])
        return int(props[Prop.TIMER_DELIVER_MS])
    except (KeyError, ValueError):
        return None


def max_delay_ms(config: StoreConfig) -> int:
    """How far ahead a timer may be (``timerMaxDelaySec``)."""
    return config.timer_max_delay_sec * 1000


def beyond_max_delay(due_ms: int, now_ms: int, config: StoreConfig) -> bool:
    """A delivery time too far ahead to be timed: refused (over remoting by ``divert_to_timer``,
    over gRPC before the send, with the proxy's own status)."""
    return due_ms - now_ms > max_delay_ms(config)


def illegal(config: StoreConfig) -> TimerRefusal:
    """Apache 5.3's answer to WHEEL_TIMER_MSG_ILLEGAL, word for word."""
    return TimerRefusal(ResponseCode.MESSAGE_ILLEGAL, "timer message illegal, the delay time should not be bigger than "
                        f"the max delay {max_delay_ms(config)}ms; or if set del msg, the delay time "
                        "should be bigger than the current time")


def divert_to_timer(msg: MessageExt, config: StoreConfig, now_ms: int) -> TimerRefusal | None:
    """For a message that ``asks_for_timer``: re-address it to the timer topic with its due time
    in TIMER_OUT_MS and its destination in REAL_TOPIC / REAL_QID; leave one due now where it is;
    or say why it is refused."""
    if not config.timer_wheel_enable:
        return TimerRefusal(ResponseCode.SYSTEM_ERROR,
                            "accurate timer message is not enabled, timerWheelEnable is false")
    due = deliver_time(msg.properties, now_ms)
    if due is None:
        return illegal(config)
    if due <= now_ms:
        if Prop.TIMER_DEL_UNIQKEY in msg.properties:  # a recall marker for a time gone (Apache: illegal)
            return illegal(config)
        return None  # due already: stored in its own topic at once
    if beyond_max_delay(due, now_ms, config):
        return illegal(config)
    msg.properties[Prop.TIMER_OUT_MS] = str(due)
    msg.properties[Prop.REAL_TOPIC] = msg.topic
    msg.properties[Prop.REAL_QID] = str(msg.queue_id)
    msg.topic, msg.queue_id = TIMER_TOPIC, 0
    return None
