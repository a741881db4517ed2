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

from ferry.client.async_sender import AsyncSender
from ferry.client.heartbeats import send_heartbeat, unregister
from ferry.client.instance import ClientInstance, not_started
from ferry.client.lifecycle import Lifecycle
from ferry.client.message import Message, MessageExt, MessageQueue, SendResult
from ferry.client.outgoing import Outgoing, joined_result
from ferry.client.producer_base import ProducerBase
from ferry.client.publish import Publisher, Target, chosen_target, oneway_target
from ferry.client.request_reply import DEFAULT_REQUEST_TIMEOUT_MS, RequestCallback
from ferry.client.requester import Requester
from ferry.client.selector import Selector
from ferry.client.send_retry import SendRetries
from ferry.client.transport import expect
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import HeartbeatRequest, SendMessageReply, UnregisterClientRequest

log = logging.getLogger("ferry.client.producer")


class Producer(ProducerBase[ClientInstance], Lifecycle):
    """Sends messages of one producer group. Thread-safe once started."""

    _async: AsyncSender | None = None
    _requester: Requester | None = None

    # ---- lifecycle ----

    def start(self) -> None:
        if self._instance is not None:
            return
        inst = self._open(ClientInstance)
        assert self._publisher is not None
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
        self._requester = Requester(inst, self._prepare, self._send_sync, self._async.submit)
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
        if self._requester is not None:
            self._requester.close()
        self._instance = None
        body = UnregisterClientRequest(client_id=inst.client_id, producer_group=self.group)
        unregister(inst, body, inst.routes.master_addrs().values())
        inst.close()

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
        where, arg, timeout_s = self._send_args(to, arg, timeout_ms)
        if where is None:
            return self._send_sync(self._prepare_one(msg), timeout_s)
        out = self._prepare([msg])
        return self._send_sync(
            out, timeout_s, lambda pub: chosen_target(pub, out.topic, msg, where, arg)
        )

    def send_batch(self, msgs: Iterable[Message]) -> SendResult:
        """Sends messages of one topic in one request and one frame.

        The result's msg_id and offset_msg_id are the ids of all messages joined by commas, in
        order (as RocketMQ); queue_offset is the first message's. The batch must stay within
        max_message_size and its messages must not be delayed.
        """
        out = self._encoder().batch(msgs)
        return self._send_sync(out, self.send_timeout_s)

    def _prepare_plain_batch(self, batch: list[Message]) -> Outgoing | None:
        return self._encoder().plain_batch(batch)

    def send_async(self, msg: Message) -> Future[SendResult]:
        """Sends without waiting, retrying as send() does.

        Messages sent this way are batched per topic automatically while earlier requests are
        in flight (auto_batch; see async_sender). The Future's callbacks run on an I/O thread:
        keep them short and never wait there for another send.
        """
        sender = self._async
        if sender is None:
            raise not_started(f"producer {self.group}")
        encoder = self._encoder()
        if sender.batching:
            plain = encoder.plain(msg)
            if plain is not None:  # encoded with its batch, as the batch leaves
                return sender.submit_plain(msg.topic, plain)
        return sender.submit(encoder.prepare_one(msg))

    def send_oneway(
        self, msg: Message, to: MessageQueue | Selector | None = None, arg: Any = None
    ) -> None:
        """Fire and forget: no reply, no retry. `to`: a queue, or a selector given `arg`."""
        out = self._prepare([msg])
        inst, publisher = self._parts()
        try:
            target = oneway_target(publisher, out.topic, msg, to, arg, may_block=True)
            inst.connection(target.address).send_oneway(
                self._request(out, target), [out.payload], **out.trace
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

    # ---- request/reply (requester.py) ----

    def request(self, msg: Message, timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS) -> MessageExt:
        """RocketMQ's request(): sends msg and returns the reply its consumer sends with
        reply(); ReplyTimeoutError when none comes within timeout_ms."""
        return self._requests().request(msg, timeout_ms)

    def request_async(
        self,
        msg: Message,
        callback: RequestCallback | None = None,
        timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
    ) -> Future[MessageExt]:
        """request() without waiting: the Future holds the reply or the error, and callback
        (on_success(reply) / on_exception(error), as RocketMQ's RequestCallback) is called
        with it on an SDK thread."""
        return self._requests().request_async(msg, callback, timeout_ms)

    def _requests(self) -> Requester:
        self._started()
        assert self._requester is not None
        return self._requester

    # ---- internals ----

    def _prepare_one(self, msg: Message) -> Outgoing:
        return self._encoder().prepare_one(msg)

    def _prepare(self, msgs: Sequence[Message]) -> Outgoing:
        """Validates and encodes (prepare.Preparer); the span and trace context are made here."""
        return self._encoder().prepare(msgs)

    def _attempt(self, out: Outgoing, target: Target, timeout_s: float) -> SendResult:
        inst = self._started()
        started = time.monotonic()
        broker = target.queue.broker_name
        try:
            result = inst.connection(target.address).request(
                self._request(out, target),
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
        retries = SendRetries(out.topic, self.retry_times, timeout_s)
        target: Target | None
        for budget in retries:
            target = None
            remaining = budget
            if retries.pause_s:  # waiting for a broker that is down to come back
                time.sleep(min(retries.pause_s, budget))
                remaining = retries.left()
                if remaining <= 0:
                    break
            try:
                if chosen is None:
                    target = publisher.next_target(out.topic, retries.avoid)
                else:
                    target = chosen(publisher)
                assert target is not None
                result = self._attempt(out, target, remaining)
            except FerryError as err:
                if retries.failed(err, publisher, target):
                    continue
                break
            except Exception as err:  # a selector's own failure
                inst.tracing.end(out.span, err)
                raise
            inst.tracing.end(out.span, address=target.address, queue_id=target.queue.queue_id)
            return result
        final = retries.final_error()
        inst.tracing.end(out.span, final)
        raise final
