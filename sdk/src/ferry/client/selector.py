"""Choosing the queue of a send yourself (RocketMQ's MessageQueueSelector): a callable, or an
object with select(mqs, msg, arg), given the topic's write queues, the message and the
`arg` of the send; it returns the queue to send to. Two ready-made ones: select_by_hash
(the same arg, the same queue, in every process) and select_random."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from ferry.client.message import Message, MessageQueue
from ferry.protocol.errors import InvalidParameterError


@runtime_checkable
class MessageQueueSelector(Protocol):
    def select(self, mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue: ...


SelectorFunction = Callable[[list[MessageQueue], Message, Any], MessageQueue]
Selector = MessageQueueSelector | SelectorFunction


def choose(selector: Selector, mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """The selector's queue, checked to be a queue of the message's topic."""
    if not mqs:
        raise InvalidParameterError(f"topic {msg.topic!r} has no writable queue to select from")
    if isinstance(selector, MessageQueueSelector):
        queue = selector.select(list(mqs), msg, arg)
    elif callable(selector):
        queue = selector(list(mqs), msg, arg)
    else:
        raise InvalidParameterError(
            f"{selector!r} is neither a MessageQueue, a MessageQueueSelector nor a callable"
        )
    if not isinstance(queue, MessageQueue):
        raise InvalidParameterError(f"the selector returned {queue!r}, not a MessageQueue")
    if queue.topic != msg.topic:
        raise InvalidParameterError(
            f"the selector returned {queue}, a queue of another topic than {msg.topic!r}"
        )
    return queue


def select_by_hash(mqs: list[MessageQueue], _msg: Message, arg: Any) -> MessageQueue:
    """The queue at crc32(str(arg)) modulo their number: an order id keeps its queue, in
    every process (RocketMQ's SelectMessageQueueByHash, with a stable hash)."""
    return mqs[zlib.crc32(str(arg).encode()) % len(mqs)]


def select_random(mqs: list[MessageQueue], _msg: Message, _arg: Any) -> MessageQueue:
    return random.choice(mqs)  # spreading load, not a secret
