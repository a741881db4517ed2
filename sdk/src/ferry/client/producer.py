"""The producer: sync, async, oneway, batch and orderly sends, with RocketMQ's retries.

A message is encoded into a CommitLog record once, in the caller's thread (bodies over
`compress_over` bytes zlib-compressed); a batch travels as one payload frame. A retriable
failure (SYSTEM_BUSY included) is retried up to `retry_times` more times within the send
timeout, on another broker when there is one, after the topic's route is refreshed. With
`send_latency_fault_enable`, slow or failing brokers are avoided for a while (latency_fault).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any

from opentelemetry import trace

from ferry.client.async_sender import AsyncSender, BatchConfig
from ferry.client.heartbeats import send_heartbeat, unregister
from ferry.client.instance import ClientInstance, not_started
from ferry.client.latency_fault import (
    LATENCY_MAX_MS,
    NOT_AVAILABLE_MS,
    FaultConfig,
    LatencyFaultTolerance,
)
from ferry.client.lifecycle import Lifecycle
from ferry.client.message import (
    Message,
    MessageQueue,
    SendResult,
    encode_message,
    encode_plain_batch,
    encode_plain_message,
    message_properties,
    plain_message,
    plain_messages,
)
from ferry.client.outgoing import Outgoing, joined_result, send_request
from ferry.client.publish import Publisher, Target
from ferry.client.route import parse_namesrv
from ferry.client.selector import Selector, choose
from ferry.client.transport import expect
from ferry.protocol.errors import (
    FerryError,
    InvalidParameterError,
    MessageIllegalError,
    RequestTimeoutError,
)
from ferry.protocol.messages import HeartbeatRequest, SendMessageReply, UnregisterClientRequest
from ferry.protocol.names import check_group, check_topic
from ferry.protocol.record import PROPERTY_UNIQ_KEY as UNIQ_KEY
from ferry.protocol.record import topic_tail

log = logging.getLogger("ferry.client.producer")

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


MiB = 1024 * 1024
COMPRESS_OVER = 4096  # compressMsgBodyOverHowmuch


class Producer(Lifecycle):
    """Sends messages of one producer group. Thread-safe once started."""

    def __init__(
        self,
        group: str,
        namesrv: str,
        *,
        send_timeout_ms: int = 3000,
        retry_times: int = 2,
        max_message_size: int = 4 * MiB,
        default_topic_queue_nums: int = 4,
        heartbeat_interval_ms: int = 30_000,
        poll_namesrv_interval_ms: int = 30_000,
        auto_batch: bool = True,
        batch_max_count: int = 256,
        batch_max_bytes: int = 512 * 1024,
        max_batches_in_flight: int = 4,
        batch_linger_ms: float = 5,
        compress_over: int = COMPRESS_OVER,
        send_latency_fault_enable: bool = False,
        latency_max_ms: tuple[int, ...] = LATENCY_MAX_MS,
        not_available_duration_ms: tuple[int, ...] = NOT_AVAILABLE_MS,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        """auto_batch: send_async messages of a topic travel in batches of up to
        batch_max_count messages / batch_max_bytes, max_batches_in_flight requests per topic at
        a time; a partial batch waits at most batch_linger_ms while requests are in flight.
        compress_over: bodies longer than this many bytes are compressed (-1: never).
        send_latency_fault_enable: avoid brokers that were slow or failed, for the time
        not_available_duration_ms[i] of the largest latency_max_ms[i] their latency reached
        (a failure counts as 10 s)."""
        check_group(group)
        parse_namesrv(namesrv)
        if retry_times < 0 or send_timeout_ms <= 0 or max_message_size <= 0:
            raise InvalidParameterError("retry_times, send_timeout_ms, max_message_size")
        if batch_max_count <= 0 or batch_max_bytes <= 0 or max_batches_in_flight <= 0:
            raise InvalidParameterError(
                "batch_max_count, batch_max_bytes, max_batches_in_flight must be positive"
            )
        if batch_linger_ms < 0:
            raise InvalidParameterError("batch_linger_ms must be >= 0")
        self.group = group
        self.namesrv = namesrv
        self.send_timeout_s = send_timeout_ms / 1000
        self.retry_times = retry_times
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self._poll_namesrv_s = poll_namesrv_interval_ms / 1000
        self._tracer_provider = tracer_provider
        self.compress_over = compress_over
        self._faults = LatencyFaultTolerance(
            FaultConfig(
                send_latency_fault_enable, tuple(latency_max_ms), tuple(not_available_duration_ms)
            )
        )
        self._batching = BatchConfig(
            auto_batch,
            batch_max_count,
            min(batch_max_bytes, max_message_size),
            max_batches_in_flight,
            batch_linger_ms / 1000,
        )
        self._instance: ClientInstance | None = None
        self._publisher: Publisher | None = None
        self._async: AsyncSender | None = None
        self._tail_lens: dict[str, int] = {}  # topics checked, and their record tails' sizes

    # ---- lifecycle ----

    def start(self) -> None:
        if self._instance is not None:
            return
        inst = ClientInstance(self.namesrv, role="producer", tracer_provider=self._tracer_provider)
        self._publisher = Publisher(inst.routes, self.default_topic_queue_nums, self._faults)
        self._async = AsyncSender(
            inst,
            self._publisher,
            self.group,
            retry_times=self.retry_times,
            timeout_s=self.send_timeout_s,
            default_topic_queue_nums=self.default_topic_queue_nums,
            batching=self._batching,
            compress_over=self.compress_over,
        )
        self._instance = inst
        inst.ticker.every(self._poll_namesrv_s, inst.routes.refresh_all)
        inst.ticker.every(self._heartbeat_s, self.heartbeat)
        inst.routes.on_new_master(self._heartbeat_to)  # a broker learns of us at once

    def shutdown(self) -> None:
        """Sends what send_async left waiting, waits for it (up to the send timeout), leaves."""
        inst = self._instance
        if inst is None:
            return
        if self._async is not None:
            self._async.close(self.send_timeout_s)
        self._instance = None
        body = UnregisterClientRequest(client_id=inst.client_id, producer_group=self.group)
        unregister(inst, body, inst.routes.master_addrs().values())
        inst.close()

    @property
    def client_id(self) -> str:
        return self._started().client_id

    def heartbeat(self) -> None:
        """Tells every known broker this client belongs to the group (every 30 s)."""
        inst = self._started()
        for addr in set(inst.routes.master_addrs().values()):
            self._heartbeat_to(addr)

    def _heartbeat_to(self, addr: str) -> None:
        inst = self._instance
        if inst is None:
            return
        body = HeartbeatRequest(client_id=inst.client_id, producer_groups=[self.group])
        send_heartbeat(inst, addr, body)

    # ---- sends ----

    def send(
        self,
        msg: Message,
        to: MessageQueue | Selector | int | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """Sends and waits for the broker; raises the typed error after the last retry.

        As RocketMQ's send: send(msg), send(msg, timeout_ms), send(msg, queue) and
        send(msg, queue, timeout_ms) to a queue of the topic, send(msg, selector, arg) and
        send(msg, selector, arg, timeout_ms) to the queue a MessageQueueSelector (a callable,
        or an object with select(mqs, msg, arg)) picks from the topic's write queues. A
        retriable failure is retried on the same queue (re-selected from a fresh route with
        a selector), never on another of the selector's choosing.
        """
        if isinstance(to, int):  # send(msg, timeout_ms)
            if isinstance(to, bool):
                raise InvalidParameterError(f"send(msg, {to}): not a queue, selector or timeout")
            to, timeout_ms = None, to
        elif isinstance(to, MessageQueue) and isinstance(arg, int) and timeout_ms is None:
            arg, timeout_ms = None, arg  # send(msg, queue, timeout_ms)
        timeout_s = self.send_timeout_s
        if timeout_ms is not None:
            if timeout_ms <= 0:
                raise InvalidParameterError(f"timeout_ms must be positive, not {timeout_ms}")
            timeout_s = timeout_ms / 1000
        if to is None:
            return self._send_sync(self._prepare_one(msg), timeout_s)
        out = self._prepare([msg])
        where = to
        return self._send_sync(
            out, timeout_s, lambda pub: self._chosen_target(pub, out.topic, msg, where, arg)
        )

    def send_batch(self, msgs: Iterable[Message]) -> SendResult:
        """Sends messages of one topic in one request and one frame.

        The result's msg_id and offset_msg_id are the ids of all messages joined by commas, in
        order (as RocketMQ); queue_offset is the first message's. The batch must stay within
        max_message_size and its messages must not be delayed.
        """
        batch = list(msgs)
        if not batch:
            raise InvalidParameterError("send_batch needs at least one message")
        out = self._prepare_plain_batch(batch)  # one topic, nothing delayed, checked in C
        if out is None:
            topic = batch[0].topic
            for msg in batch:
                if msg.topic != topic:
                    raise InvalidParameterError("every message of a batch must have the same topic")
                if msg.delay_level > 0 or msg.deliver_at_ms is not None:
                    raise InvalidParameterError("batch messages cannot be delayed")
            out = self._prepare(batch)
        return self._send_sync(out, self.send_timeout_s)

    def _prepare_plain_batch(self, batch: list[Message]) -> Outgoing | None:
        """The batch encoded in one pass (ids from one block, no properties dicts) when every
        message is plain (no properties of its own) and tracing is off; None otherwise. The
        bytes are the same as _prepare's."""
        inst = self._started()
        if inst.tracing.enabled or len(batch) < 2:
            return None
        topic = batch[0].topic
        plain = plain_messages(batch, topic, self._tail_len(topic))
        if plain is None:
            return None
        ids = inst.msg_ids.next_ids(len(plain))
        payload = encode_plain_batch(
            topic,
            plain,
            ids,
            born_timestamp=int(time.time() * 1000),
            born_host=inst.born_host,
            compress_over=self.compress_over,
        )
        if len(payload) > self.max_message_size:
            raise MessageIllegalError(
                f"batch is {len(payload)} bytes, over {self.max_message_size}"
            )
        return Outgoing(topic, ids, payload, len(plain), "", "", None, True)

    def _tail_len(self, topic: str) -> int:
        """Checks a topic's name once; the size of its name's part of a record."""
        tail_len = self._tail_lens.get(topic)
        if tail_len is None:
            check_topic(topic)
            tail_len = self._tail_lens[topic] = len(topic_tail(topic))
        return tail_len

    def send_async(self, msg: Message) -> Future[SendResult]:
        """Sends without waiting, retrying as send() does.

        Messages sent this way are batched per topic automatically while earlier requests are
        in flight (auto_batch; see async_sender). The Future's callbacks run on an I/O thread:
        keep them short and never wait there for another send.
        """
        sender = self._async
        if sender is None:
            raise not_started(f"producer {self.group}")
        inst = self._started()
        if sender.batching and not inst.tracing.enabled:
            topic = msg.topic
            tail_len = self._tail_lens.get(topic) or self._tail_len(topic)
            if len(msg.body) > self.max_message_size:
                raise MessageIllegalError(
                    f"message body is {len(msg.body)} bytes, over {self.max_message_size}"
                )
            plain = plain_message(msg, tail_len)
            if plain is not None:  # encoded with its batch, as the batch leaves
                return sender.submit_plain(topic, plain)
        return sender.submit(self._prepare_one(msg))

    def send_oneway(
        self, msg: Message, to: MessageQueue | Selector | None = None, arg: Any = None
    ) -> None:
        """Fire and forget: no reply, no retry. `to`: a queue, or a selector given `arg`."""
        out = self._prepare([msg])
        inst, publisher = self._parts()
        try:
            if to is None:
                target = publisher.next_target(out.topic)
            else:
                target = self._chosen_target(publisher, out.topic, msg, to, arg)
            assert target is not None
            inst.connection(target.address).send_oneway(
                send_request(self.group, out, target, self.default_topic_queue_nums),
                [out.payload],
                traceparent=out.traceparent,
                tracestate=out.tracestate,
            )
        except Exception as err:  # a FerryError, or the selector's own failure
            inst.tracing.end(out.span, err)
            raise
        inst.tracing.end(out.span, address=target.address, queue_id=target.queue.queue_id)

    def send_orderly(self, msg: Message, sharding_key: str | bytes) -> SendResult:
        """Messages with the same key go to the same queue (crc32 of the key modulo the number
        of write queues), so they are consumed in order. Not retried on another queue."""
        out = self._prepare([msg])
        inst, publisher = self._parts()
        try:
            target = publisher.orderly_target(out.topic, sharding_key)
            result = self._attempt(out, target, self.send_timeout_s)
        except FerryError as err:
            inst.tracing.end(out.span, err)
            raise
        inst.tracing.end(out.span, address=target.address, queue_id=target.queue.queue_id)
        return result

    # ---- internals ----

    @staticmethod
    def _chosen_target(
        publisher: Publisher, topic: str, msg: Message, to: MessageQueue | Selector, arg: Any
    ) -> Target:
        queue = (
            to
            if isinstance(to, MessageQueue)
            else choose(to, publisher.write_queues(topic), msg, arg)
        )
        return publisher.queue_target(topic, queue)

    def _started(self) -> ClientInstance:
        inst = self._instance
        if inst is None:
            raise not_started(f"producer {self.group}")
        return inst

    def _parts(self) -> tuple[ClientInstance, Publisher]:
        inst = self._started()
        assert self._publisher is not None
        return inst, self._publisher

    def _prepare_one(self, msg: Message) -> Outgoing:
        """_prepare for one message; without properties of its own, delay, timer or tracing
        (the common send) it skips the properties dict and the general checks."""
        inst = self._started()
        if msg.properties or msg.delay_level > 0 or msg.deliver_at_ms is not None:
            return self._prepare([msg])
        if inst.tracing.enabled:
            return self._prepare([msg])
        topic = msg.topic
        self._tail_len(topic)
        if len(msg.body) > self.max_message_size:
            raise MessageIllegalError(
                f"message body is {len(msg.body)} bytes, over {self.max_message_size}"
            )
        msg_id = inst.msg_ids.next_id()
        payload = encode_plain_message(
            msg,
            msg_id,
            born_timestamp=int(time.time() * 1000),
            born_host=inst.born_host,
            compress_over=self.compress_over,
        )
        return Outgoing(topic, [msg_id], payload, 1, "", "", None, True)

    def _prepare(self, msgs: Sequence[Message]) -> Outgoing:
        """Validates and encodes; the span and trace context are created here."""
        inst = self._started()
        first = msgs[0]
        topic = first.topic
        self._tail_len(topic)  # checks the name once
        single = len(msgs) == 1
        if single and len(first.body) > self.max_message_size:
            raise MessageIllegalError(
                f"message body is {len(first.body)} bytes, over {self.max_message_size}"
            )
        # a msg id the caller set (UNIQ_KEY) is kept, as RocketMQ does: a resend of the same
        # logical message then carries the same id, so consumers can spot the duplicate
        ids = [msg.properties.get(UNIQ_KEY) or inst.msg_ids.next_id() for msg in msgs]
        props = [message_properties(msg, msg_id) for msg, msg_id in zip(msgs, ids, strict=True)]
        span = inst.tracing.start_send(topic, msgs, ids) if inst.tracing.enabled else None
        traceparent = tracestate = ""
        if span is not None:
            for carrier in props:
                inst.tracing.inject(span, carrier)
            traceparent = props[0].get("traceparent", "")
            tracestate = props[0].get("tracestate", "")
        born = int(time.time() * 1000)
        try:
            if single:
                payload = encode_message(
                    first,
                    props[0],
                    born_timestamp=born,
                    born_host=inst.born_host,
                    compress_over=self.compress_over,
                )
            else:
                payload = b"".join(
                    encode_message(
                        msg,
                        p,
                        born_timestamp=born,
                        born_host=inst.born_host,
                        compress_over=self.compress_over,
                    )
                    for msg, p in zip(msgs, props, strict=True)
                )
                if len(payload) > self.max_message_size:
                    raise MessageIllegalError(
                        f"batch is {len(payload)} bytes, over {self.max_message_size}"
                    )
        except FerryError as err:
            inst.tracing.end(span, err)
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

    def _attempt(self, out: Outgoing, target: Target, timeout_s: float) -> SendResult:
        inst = self._started()
        started = time.monotonic()
        broker = target.queue.broker_name
        try:
            result = inst.connection(target.address).request(
                send_request(self.group, out, target, self.default_topic_queue_nums),
                [out.payload],
                timeout_s=timeout_s,
                traceparent=out.traceparent,
                tracestate=out.tracestate,
                direct=True,  # on this thread's own socket: no hand-off to the I/O thread
            )
        except FerryError as err:
            self._faults.update(broker, 0, failed=err.retriable)
            raise
        self._faults.update(broker, (time.monotonic() - started) * 1000)
        return joined_result(out, target, expect(result, SendMessageReply))

    def _send_sync(
        self,
        out: Outgoing,
        timeout_s: float,
        chosen: Callable[[Publisher], Target] | None = None,
    ) -> SendResult:
        """Sends with retries within the timeout: round robin, avoiding the broker that just
        failed; or to the `chosen` queue (a given queue, or a selector's pick from a fresh
        route after a failure), never elsewhere."""
        inst, publisher = self._parts()
        deadline = time.monotonic() + timeout_s
        avoid: str | None = None
        last_error: FerryError | None = None
        target: Target | None
        for attempt in range(1 + self.retry_times):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            target = None
            try:
                if chosen is None:
                    target = publisher.next_target(out.topic, avoid)
                else:
                    target = chosen(publisher)
                assert target is not None
                result = self._attempt(out, target, remaining)
            except FerryError as err:
                last_error = err
                if not err.retriable:
                    break
                log.debug("send to %s failed (attempt %d): %s", out.topic, attempt + 1, err)
                publisher.failed(out.topic)
                if target is not None:
                    avoid = target.queue.broker_name
                continue
            except Exception as err:  # a selector's own failure
                inst.tracing.end(out.span, err)
                raise
            inst.tracing.end(out.span, address=target.address, queue_id=target.queue.queue_id)
            return result
        final = last_error or RequestTimeoutError(f"send to {out.topic} timed out")
        inst.tracing.end(out.span, final)
        raise final
