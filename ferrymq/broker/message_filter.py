"""What a pull's subscription lets through, in RocketMQ's two stages: the ConsumeQueue entry's
tags code (TAG subscriptions), then the stored message's properties (SQL92 selectors, with
``enablePropertyFilter``). The same filter decides whether an arrival wakes a held pull.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ferrymq.common.message import MessageExt, decode_record
from ferrymq.common.protocol import SubscriptionData
from ferrymq.filter.sql92 import Selector, SqlError, compile_selector
from ferrymq.remoting.codes import ResponseCode
from ferrymq.store.dispatch import tag_hash

__all__ = ["FilterRefused", "MessageFilter", "check_expression", "message_filter"]


class FilterRefused(Exception):
    """The subscription cannot be served: ``code`` and ``remark`` are RocketMQ's answer."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass(frozen=True)
class MessageFilter:
    tags: Callable[[int], bool] | None = None  # ConsumeQueue stage: tagsCode -> wanted
    selector: Selector | None = None  # CommitLog stage: the message's properties

    def record(self) -> Callable[[bytes], bool] | None:
        """The CommitLog-stage check on a stored record, or None when there is none."""
        selector = self.selector
        if selector is None:
            return None
        return lambda record: selector.matches(decode_record(record)[0].properties)

    def wants(self, msg: MessageExt) -> bool:
        """Whether a message just stored is one this subscription would receive."""
        if self.tags is not None and not self.tags(tag_hash(msg.properties)):
            return False
        return self.selector is None or self.selector.matches(msg.properties)

    @property
    def passes_all(self) -> bool:
        return self.tags is None and self.selector is None


def check_expression(sub: SubscriptionData, property_filter_enabled: bool) -> Selector | None:
    """CHECK_CLIENT_CONFIG's and PULL_MESSAGE's test of a non-TAG subscription, answered as
    RocketMQ 4.9 answers it; the compiled selector (None for TAG subscriptions)."""
    kind = (sub.expression_type or "TAG").upper()
    if kind == "TAG":
        return None
    if not property_filter_enabled:
        raise FilterRefused(ResponseCode.SYSTEM_ERROR,
                            f"The broker does not support consumer to filter message by {kind}")
    if kind != "SQL92":
        raise FilterRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"unknown expression type {kind}")
    try:
        return compile_selector(sub.sub_string)
    except SqlError as exc:
        raise FilterRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc)) from None


def message_filter(sub: SubscriptionData, property_filter_enabled: bool) -> MessageFilter:
    """The filter of one subscription; FilterRefused when it cannot be served."""
    selector = check_expression(sub, property_filter_enabled)
    if selector is not None:
        return MessageFilter(selector=selector)
    if sub.matches_all:
        return MessageFilter()
    codes = frozenset(sub.code_set)
    return MessageFilter(tags=lambda tags_code: tags_code in codes)
