"""Asynchronous sends with automatic batching (RocketMQ 5's autoBatch, self-tuning).

Messages of a topic wait in an accumulator while `max_batches_in_flight` requests of that topic
are already out; the next request takes everything waiting (up to a count and a byte limit), so
an idle producer sends each message at once and a busy one sends big batches, one frame each.
Completions arrive on an I/O thread; anything that may block (a route lookup after a failure,
a retry) moves to the client's timer thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from ferry.client.instance import ClientInstance
from ferry.client.message import SendResult
from ferry.client.outgoing import Outgoing, each_result, join, send_request
from ferry.client.publish import Publisher, Target
from ferry.client.transport import Result, expect
from ferry.protocol.errors import FerryError, RequestTimeoutError
from ferry.protocol.messages import SendMessageReply

log = logging.getLogger("ferry.client.producer")

Item = tuple[Outgoing, Future[SendResult]]
OnReply = Callable[[SendMessageReply, Target], None]
OnError = Callable[[FerryError], None]


@dataclass(frozen=True)
class BatchConfig:
    enabled: bool = True
    max_count: int = 128
    max_bytes: int = 256 * 1024
    max_batches_in_flight: int = 4  # per topic


@dataclass
class TopicAccumulator:
    """Messages of one topic waiting to go out; plain state, guarded by the sender's lock."""

    waiting: list[Item] = field(default_factory=list)
    waiting_bytes: int = 0
    sealed: collections.deque[list[Item]] = field(default_factory=collections.deque)
    in_flight: int = 0

    def add(self, item: Item, config: BatchConfig) -> None:
        size = len(item[0].payload)
        if self.waiting and self.waiting_bytes + size > config.max_bytes:
            self.seal()  # a batch never grows past max_bytes (kept under maxMessageSize)
        self.waiting.append(item)
        self.waiting_bytes += size
        if len(self.waiting) >= config.max_count or self.waiting_bytes >= config.max_bytes:
            self.seal()

    def seal(self) -> None:
        if self.waiting:
            self.sealed.append(self.waiting)
            self.waiting = []
            self.waiting_bytes = 0

    def next_batch(self, window: int) -> list[Item] | None:
        """A batch to send now, if the window allows; counted as in flight."""
        if self.in_flight >= window:
            return None
        if not self.sealed:
            self.seal()
        if not self.sealed:
            return None
        self.in_flight += 1
        return self.sealed.popleft()


class AsyncSender:
    def __init__(
        self,
        instance: ClientInstance,
        publisher: Publisher,
        group: str,
        *,
        retry_times: int,
        timeout_s: float,
        default_topic_queue_nums: int,
        batching: BatchConfig,
    ) -> None:
        self._inst = instance
        self._publisher = publisher
        self._group = group
        self._retry_times = retry_times
        self._timeout_s = timeout_s
        self._queue_nums = default_topic_queue_nums
        self._batching = batching
        self._cond = threading.Condition()
        self._topics: dict[str, TopicAccumulator] = {}
        self._outstanding = 0
        self._closing = False

    def submit(self, out: Outgoing) -> Future[SendResult]:
        result: Future[SendResult] = Future()
        result.set_running_or_notify_cancel()  # a send cannot be called back: cancel() is refused
        with self._cond:
            self._outstanding += 1
            if not (self._batching.enabled and out.batchable):
                batch = None
            else:
                acc = self._topics.get(out.topic)
                if acc is None:
                    acc = self._topics[out.topic] = TopicAccumulator()
                acc.add((out, result), self._batching)
                batch = acc.next_batch(self._window())
                if batch is None:
                    return result
        if batch is None:
            self._send_single(out, result)
        else:
            self._send_batch(out.topic, batch, may_block=True)
        return result

    def close(self, timeout_s: float) -> None:
        """Sends everything waiting, window or not, and waits for the outcomes."""
        with self._cond:
            self._closing = True
            topics = list(self._topics)
        for topic in topics:
            while True:
                with self._cond:
                    batch = self._topics[topic].next_batch(self._window())
                if batch is None:
                    break
                self._send_batch(topic, batch, may_block=True)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._outstanding and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))

    def _window(self) -> int:
        return 1 << 30 if self._closing else self._batching.max_batches_in_flight

    def _settled(self, count: int) -> None:
        with self._cond:
            self._outstanding -= count
            if not self._outstanding:
                self._cond.notify_all()

    # ---- one message ----

    def _send_single(self, out: Outgoing, result: Future[SendResult]) -> None:
        tracing = self._inst.tracing

        def ok(reply: SendMessageReply, target: Target) -> None:
            try:
                (sent,) = each_result(out, target, reply)
            except FerryError as err:
                fail(err)
                return
            tracing.end(out.span, address=target.address, queue_id=target.queue.queue_id)
            result.set_result(sent)
            self._settled(1)

        def fail(err: FerryError) -> None:
            tracing.end(out.span, err)
            result.set_exception(err)
            self._settled(1)

        deadline = time.monotonic() + self._timeout_s
        self.attempt(out, deadline, 0, None, ok, fail, may_block=True)

    # ---- batches ----

    def _send_batch(self, topic: str, items: list[Item], *, may_block: bool) -> None:
        out = items[0][0] if len(items) == 1 else join(topic, [o for o, _ in items])
        tracing = self._inst.tracing

        def ok(reply: SendMessageReply, target: Target) -> None:
            try:
                results = each_result(out, target, reply)
            except FerryError as err:
                fail(err)
                return
            for (part, future), sent in zip(items, results, strict=True):
                tracing.end(part.span, address=target.address, queue_id=target.queue.queue_id)
                future.set_result(sent)
            self._settled(len(items))
            self._batch_finished(topic)

        def fail(err: FerryError) -> None:
            for part, future in items:
                tracing.end(part.span, err)
                future.set_exception(err)
            self._settled(len(items))
            self._batch_finished(topic)

        deadline = time.monotonic() + self._timeout_s
        self.attempt(out, deadline, 0, None, ok, fail, may_block=may_block)

    def _batch_finished(self, topic: str) -> None:
        with self._cond:
            acc = self._topics[topic]
            acc.in_flight -= 1
            batch = acc.next_batch(self._window())
        if batch is not None:
            # Usually on an I/O thread: only a cached route may be used here.
            self._send_batch(topic, batch, may_block=False)

    # ---- attempts and retries ----

    def attempt(
        self,
        out: Outgoing,
        deadline: float,
        attempt: int,
        avoid: str | None,
        ok: OnReply,
        fail: OnError,
        *,
        may_block: bool,
    ) -> None:
        """One try; a retriable failure tries again on the timer thread within the deadline."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            fail(RequestTimeoutError(f"send to {out.topic} timed out"))
            return
        try:
            target = self._publisher.next_target(out.topic, avoid, may_block=may_block)
            if target is None:
                self._later(
                    lambda: self.attempt(out, deadline, attempt, avoid, ok, fail, may_block=True),
                    fail,
                )
                return
            future = self._inst.connection(target.address).submit(
                send_request(self._group, out, target, self._queue_nums),
                [out.payload],
                timeout_s=remaining,
                traceparent=out.traceparent,
                tracestate=out.tracestate,
            )
        except FerryError as err:
            self._retry_or_fail(out, deadline, attempt, avoid, ok, fail, err)
            return

        started = time.monotonic()
        faults = self._publisher.faults

        def done(f: Future[Result]) -> None:
            broker = target.queue.broker_name
            try:
                reply = expect(f.result(), SendMessageReply)
            except FerryError as err:
                if faults is not None:
                    faults.update(broker, 0, failed=err.retriable)
                self._retry_or_fail(out, deadline, attempt, broker, ok, fail, err)
                return
            if faults is not None:
                faults.update(broker, (time.monotonic() - started) * 1000)
            ok(reply, target)

        future.add_done_callback(done)

    def _retry_or_fail(
        self,
        out: Outgoing,
        deadline: float,
        attempt: int,
        avoid: str | None,
        ok: OnReply,
        fail: OnError,
        err: FerryError,
    ) -> None:
        if err.retriable and attempt < self._retry_times and time.monotonic() < deadline:
            log.debug("async send to %s failed (attempt %d): %s", out.topic, attempt + 1, err)
            self._publisher.failed(out.topic)
            self._later(
                lambda: self.attempt(out, deadline, attempt + 1, avoid, ok, fail, may_block=True),
                fail,
            )
            return
        fail(err)

    def _later(self, fn: Callable[[], None], fail: OnError) -> None:
        if not self._inst.ticker.later(0, fn):
            fail(FerryError("producer shut down before the send was retried"))
