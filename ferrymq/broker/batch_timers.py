"""Timers and delay levels on the messages of a batch (SEND_BATCH_MESSAGE; docs/timers.md#batches).

Each message of a batch body carries its own properties. A message asking for a timer
(TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS) or a delay level (DELAY) is taken out of the
batch and re-addressed exactly as a single send re-addresses it (``timer_send``, ``schedule``);
the others stay together as the batch. One refused message refuses the whole batch.

Pure: no I/O, the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ferrymq.broker.schedule import divert_to_schedule, is_delayable
from ferrymq.broker.timer_send import TIMER_REQUEST_PROPS, TimerRefusal, asks_for_timer, divert_to_timer
from ferrymq.common.message import MessageExt, Prop
from ferrymq.remoting.codes import ResponseCode
from ferrymq.store.config import StoreConfig
from ferrymq.store.results import AppendResult, PutStatus

# The properties a split acts on: a timer request (TIMER_DELAY_SEC, TIMER_DELAY_MS,
# TIMER_DELIVER_MS) or a delay level (DELAY). The send path asks ``batch_messages`` whether any
# message names one (a look at the names of each message's properties, none at the bodies: a
# search of the encoded body for the names cost 1.2 us per KiB message at batch32); a batch where
# none does is stored as sent.
SPLIT_PROPS: tuple[str, ...] = (*TIMER_REQUEST_PROPS, Prop.DELAY)


def header_delay_refusal(batch_props: Mapping[str, str], config: StoreConfig) -> TimerRefusal | None:
    """A delay level on the batch itself (the request header's properties): Apache 5.3 refuses the
    batch (``CommitLog.asyncPutMessages``) with its generic MESSAGE_ILLEGAL remark, and so does
    FerryMQ, word for word."""
    try:
        level = int(batch_props.get(Prop.DELAY, 0))
    except ValueError:
        return None
    if level <= 0:
        return None
    return TimerRefusal(ResponseCode.MESSAGE_ILLEGAL,
                        "the message is illegal, maybe msg body or properties length not matched. msg body length "
                        f"limit {config.max_message_size}B, msg properties length limit 32KB.")


@dataclass
class BatchSplit:
    """A batch's messages, in the order sent, as they are to be stored: ``plain`` together as the
    batch (in its topic and queue), each of ``timed`` on its own (under the timer topic or a
    delay level's queue). ``places[i]`` is where message ``i`` went: -1 for the plain batch, else
    its index in ``timed``."""
    plain: list[MessageExt]
    timed: list[MessageExt]
    places: list[int]


def split_batch(msgs: list[MessageExt], config: StoreConfig, level_count: int, now_ms: int) -> BatchSplit | TimerRefusal:
    """Re-address the messages asking for a timer or a delay level as a single send would, or say
    why the batch is refused (the first refused message's refusal; nothing is stored then)."""
    plain: list[MessageExt] = []
    timed: list[MessageExt] = []
    places: list[int] = []
    for m in msgs:
        topic = m.topic
        if asks_for_timer(m):
            refusal = divert_to_timer(m, config, now_ms)
            if refusal is not None:
                return refusal
        elif is_delayable(m):
            divert_to_schedule(m, level_count)
        if m.topic == topic:  # no timer, or one due already: stays in the batch
            places.append(-1)
            plain.append(m)
        else:
            places.append(len(timed))
            timed.append(m)
    return BatchSplit(plain, timed, places)


def puts_of(split: BatchSplit) -> list[MessageExt | list[MessageExt]]:
    """What the store is given, all or nothing: the plain batch (if any messages stayed), then
    each re-addressed message on its own."""
    return ([split.plain] if split.plain else []) + list(split.timed)


def merged_result(split: BatchSplit, results: list[AppendResult]) -> AppendResult:
    """One answer for the whole batch from the results of ``puts_of``: the first put not stored,
    if any; else the message ids in the order the messages were sent, the queue offset of the
    plain batch in its queue (or, when every message waits, that of the first waiting one in
    its system queue, as a single timer send's answer carries), and the first status that is not
    PUT_OK (a flush or replication wait that timed out)."""
    lost = next((r for r in results if not r.ok), None)
    if lost is not None:
        return AppendResult(lost.status, remark=lost.remark)
    plain = results[0] if split.plain else None
    timed = results[1:] if split.plain else results
    ids, plain_i = [], 0
    for place in split.places:
        if place < 0:
            ids.append(plain.msg_ids[plain_i])  # type: ignore[union-attr]  # a place < 0 means a plain batch
            plain_i += 1
        else:
            ids.append(timed[place].msg_ids[0])
    first = plain if plain is not None else timed[0]
    status = next((r.status for r in results if r.status is not PutStatus.PUT_OK), PutStatus.PUT_OK)
    return AppendResult(status, wrote_offset=min(r.wrote_offset for r in results),
                        wrote_bytes=sum(r.wrote_bytes for r in results), msg_ids=ids,
                        queue_offset=first.queue_offset, msg_num=sum(r.msg_num for r in results),
                        store_timestamp=first.store_timestamp)
