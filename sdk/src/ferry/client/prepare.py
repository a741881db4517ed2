"""Messages checked and encoded into CommitLog records before they leave, without I/O.

A Producer (sync or ferry.client.aio) encodes each message once, in the caller's thread or
task, into an Outgoing that every attempt sends as it is: ids made (or the caller's UNIQ_KEY
kept), trace context injected, bodies over `compress_over` compressed, sizes checked.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from ferry.client.message import Message, PlainMessage
from ferry.client.message_encode import (
    encode_message,
    encode_plain_batch,
    encode_plain_message,
    message_properties,
    plain_message,
    plain_messages,
)
from ferry.client.msg_id import MessageIdGenerator
from ferry.client.outgoing import Outgoing
from ferry.client.tracing import Tracing
from ferry.protocol.errors import FerryError, InvalidParameterError, MessageIllegalError
from ferry.protocol.names import check_topic
from ferry.protocol.record import PROPERTY_UNIQ_KEY as UNIQ_KEY
from ferry.protocol.record import topic_tail

# RocketMQ 5's relative timer properties (the absolute one is Message.deliver_at_ms)
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"


def relative_delay_ms(props: dict[str, str]) -> int:
    """TIMER_DELAY_MS, or TIMER_DELAY_SEC x 1000, from a message's properties; 0 if neither."""
    for key, scale in ((PROPERTY_TIMER_DELAY_MS, 1), (PROPERTY_TIMER_DELAY_SEC, 1000)):
        value = props.get(key)
        if value is not None:
            text = str(value)
            if not text.isdigit():
                raise InvalidParameterError(f"{key} must be a whole number, not {text!r}")
            return int(text) * scale
    return 0


class Preparer:
    """Encodes the messages of one started producer (its ids, host and tracing)."""

    def __init__(
        self,
        msg_ids: MessageIdGenerator,
        born_host: bytes,
        tracing: Tracing,
        *,
        max_message_size: int,
        compress_over: int,
    ) -> None:
        self.msg_ids = msg_ids
        self.born_host = born_host
        self.tracing = tracing
        self.max_message_size = max_message_size
        self.compress_over = compress_over
        self._tail_lens: dict[str, int] = {}  # topics checked, and their record tails' sizes

    def tail_len(self, topic: str) -> int:
        """Checks a topic's name once; the size of its name's part of a record."""
        tail_len = self._tail_lens.get(topic)
        if tail_len is None:
            check_topic(topic)
            tail_len = self._tail_lens[topic] = len(topic_tail(topic))
        return tail_len

    def _check_body(self, msg: Message) -> None:
        if len(msg.body) > self.max_message_size:
            raise MessageIllegalError(
                f"message body is {len(msg.body)} bytes, over {self.max_message_size}"
            )

    def plain(self, msg: Message) -> PlainMessage | None:
        """The message as an automatic batch takes it (encoded when the batch leaves), when it
        is plain and tracing is off; None otherwise (prepare_one it)."""
        if self.tracing.enabled:
            return None
        topic = msg.topic
        tail_len = self._tail_lens.get(topic) or self.tail_len(topic)
        self._check_body(msg)
        return plain_message(msg, tail_len)

    def batch(self, msgs: Iterable[Message]) -> Outgoing:
        """send_batch's request: messages of one topic, none delayed, within the size."""
        batch = list(msgs)
        if not batch:
            raise InvalidParameterError("send_batch needs at least one message")
        out = self.plain_batch(batch)  # one topic, nothing delayed, checked in C
        if out is not None:
            return out
        topic = batch[0].topic
        for msg in batch:
            if msg.topic != topic:
                raise InvalidParameterError("every message of a batch must have the same topic")
            if msg.delay_level > 0 or msg.deliver_at_ms is not None:
                raise InvalidParameterError("batch messages cannot be delayed")
        return self.prepare(batch)

    def plain_batch(self, batch: list[Message]) -> Outgoing | None:
        """The batch encoded in one pass (ids from one block, no properties dicts) when every
        message is plain (no properties of its own) and tracing is off; None otherwise. The
        bytes are the same as prepare's."""
        if self.tracing.enabled or len(batch) < 2:
            return None
        topic = batch[0].topic
        plain = plain_messages(batch, topic, self.tail_len(topic))
        if plain is None:
            return None
        ids = self.msg_ids.next_ids(len(plain))
        payload = encode_plain_batch(
            topic,
            plain,
            ids,
            born_timestamp=int(time.time() * 1000),
            born_host=self.born_host,
            compress_over=self.compress_over,
        )
        if len(payload) > self.max_message_size:
            raise MessageIllegalError(
                f"batch is {len(payload)} bytes, over {self.max_message_size}"
            )
        return Outgoing(topic, ids, payload, len(plain), "", "", None, True)

    def prepare_one(self, msg: Message) -> Outgoing:
        """prepare for one message; without properties of its own, delay, timer or tracing
        (the common send) it skips the properties dict and the general checks."""
        if msg.properties or msg.delay_level > 0 or msg.deliver_at_ms is not None:
            return self.prepare([msg])
        if self.tracing.enabled:
            return self.prepare([msg])
        topic = msg.topic
        self.tail_len(topic)
        self._check_body(msg)
        msg_id = self.msg_ids.next_id()
        payload = encode_plain_message(
            msg,
            msg_id,
            born_timestamp=int(time.time() * 1000),
            born_host=self.born_host,
            compress_over=self.compress_over,
        )
        return Outgoing(topic, [msg_id], payload, 1, "", "", None, True)

    def prepare(self, msgs: Sequence[Message]) -> Outgoing:
        """Validates and encodes; the span and trace context are created here."""
        tracing = self.tracing
        first = msgs[0]
        topic = first.topic
        self.tail_len(topic)  # checks the name once
        single = len(msgs) == 1
        if single:
            self._check_body(first)
        # a msg id the caller set (UNIQ_KEY) is kept, as RocketMQ does: a resend of the same
        # logical message then carries the same id, so consumers can spot the duplicate
        ids = [msg.properties.get(UNIQ_KEY) or self.msg_ids.next_id() for msg in msgs]
        props = [message_properties(msg, msg_id) for msg, msg_id in zip(msgs, ids, strict=True)]
        span = tracing.start_send(topic, msgs, ids) if tracing.enabled else None
        traceparent = tracestate = ""
        if span is not None:
            for carrier in props:
                tracing.inject(span, carrier)
            traceparent = props[0].get("traceparent", "")
            tracestate = props[0].get("tracestate", "")
        born = int(time.time() * 1000)
        try:
            payload = b"".join(
                encode_message(
                    msg,
                    p,
                    born_timestamp=born,
                    born_host=self.born_host,
                    compress_over=self.compress_over,
                )
                for msg, p in zip(msgs, props, strict=True)
            )
            if not single and len(payload) > self.max_message_size:
                raise MessageIllegalError(
                    f"batch is {len(payload)} bytes, over {self.max_message_size}"
                )
        except FerryError as err:
            tracing.end(span, err)
            raise
        batchable = all(m.delay_level <= 0 and m.deliver_at_ms is None for m in msgs)
        deliver_at_ms = first.deliver_at_ms or 0
        if single and batchable and first.properties:
            relative = relative_delay_ms(first.properties)
            if relative > 0:  # RocketMQ 5's TIMER_DELAY_MS / TIMER_DELAY_SEC: a timer message
                batchable = False
                deliver_at_ms = born + relative
        if batchable:
            return Outgoing(
                topic, ids, payload, len(msgs), traceparent, tracestate, span, batchable
            )
        return Outgoing(
            topic,
            ids,
            payload,
            len(msgs),
            traceparent,
            tracestate,
            span,
            batchable,
            delay_level=max(first.delay_level, 0),
            deliver_at_ms=deliver_at_ms,
        )
