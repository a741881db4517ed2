"""Asynchronous sends with automatic batching (RocketMQ 5's autoBatch: count, bytes, linger).

Messages of a topic wait in an accumulator (batching.py) and leave as batches, one request and
one frame each, at most `max_batches_in_flight` requests per topic at a time:
- a full batch (max_count messages, or max_bytes) leaves as soon as the window allows;
- a partial one leaves when nothing of its topic is in flight (so an idle producer sends each
  message at once), or once its first message has waited `linger_s`: checked whenever a
  message is added or a request completes. No timer: a partial batch is only held while
  requests are in flight, and each of those completes (or fails at its deadline) and checks.
Under load that forms full batches; in between, a batch holds what arrived during one round
trip, as Nagle's algorithm does, so the request rate stays near one per round trip. (A linger
timer cost the timer thread two wake-ups per held batch: at 2,000 msg/s, +1.8 context
switches per message.)

Every message gets a SendFuture (send_future.py) that its batch settles at once. Completions
arrive on an I/O thread; anything that may block (a route lookup after a failure, a retry)
runs on the client's timer thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from ferry.client.batching import Batch, BatchConfig, Item, TopicAccumulator, build_batch
from ferry.client.instance import ClientInstance
from ferry.client.message import PlainMessage, SendResult
from ferry.client.outgoing import Outgoing, checked, each_result, send_request
from ferry.client.publish import Publisher, Target
from ferry.client.send_future import Outcome, SendFuture, settle
from ferry.client.send_retry import RECONNECT_PAUSE_S, rides_out
from ferry.client.transport import Result, expect
from ferry.protocol.errors import FerryError, RequestTimeoutError
from ferry.protocol.messages import SendMessageReply

# Outcome, SendFuture and settle stay importable from here too: bench/send_futures.py runs
# against older trees, which have only this module.
__all__ = ["AsyncSender", "Outcome", "SendFuture", "settle"]

log = logging.getLogger("ferry.client.producer")

OnReply = Callable[[SendMessageReply, Target], None]
OnError = Callable[[FerryError], None]


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
        compress_over: int = -1,
    ) -> None:
        self._inst = instance
        self._compress_over = compress_over
        self._publisher = publisher
        self._group = group
        self._retry_times = retry_times
        self._timeout_s = timeout_s
        self._queue_nums = default_topic_queue_nums
        self._batching = batching
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._topics: dict[str, TopicAccumulator] = {}
        self._outstanding = 0
        self._closing = False

    def submit(self, out: Outgoing) -> Future[SendResult]:
        if not (self._batching.enabled and out.batchable):
            with self._lock:
                self._outstanding += 1
            future = SendFuture(Outcome(), 0)
            self._send_single(out, future)
            return future
        return self._add(out.topic, out, len(out.payload))

    @property
    def batching(self) -> bool:
        return self._batching.enabled

    def submit_plain(self, topic: str, msg: PlainMessage) -> Future[SendResult]:
        """A plain message (see message.plain_message), encoded when its batch leaves."""
        return self._add(topic, msg, msg.size)

    def _add(self, topic: str, item: Item, size: int) -> Future[SendResult]:
        with self._lock:
            self._outstanding += 1
            acc = self._topics.get(topic)
            if acc is None:
                acc = self._topics[topic] = TopicAccumulator(self._batching)
            future = acc.add(item, size)
            window = self._window()
            if acc.in_flight >= window:  # the usual case under load: nothing can leave
                filled = acc.waiting is None  # this message sealed a batch that must wait
                batches = []
            else:
                filled = False
                batches = acc.ready(time.monotonic(), window, self._closing)
        if filled:
            # The caller outpaces the window: let the I/O thread, which needs the GIL to
            # complete requests and send the next batch, have it now rather than at the end
            # of the caller's switch interval (100k send_async calls: 238k -> 276k msg/s).
            time.sleep(0)
        for batch in batches:
            self._send_batch(topic, batch, may_block=True)
        return future

    def close(self, timeout_s: float) -> None:
        """Sends everything waiting, window or not, and waits for the outcomes."""
        with self._lock:
            self._closing = True
            now = time.monotonic()
            todo = [
                (topic, acc.ready(now, self._window(), flush=True))
                for topic, acc in self._topics.items()
            ]
        for topic, batches in todo:
            for batch in batches:
                self._send_batch(topic, batch, may_block=True)
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._outstanding and time.monotonic() < deadline:
                self._idle.wait(max(0.0, deadline - time.monotonic()))

    def _window(self) -> int:
        return 1 << 30 if self._closing else self._batching.max_batches_in_flight

    def _settled(self, count: int) -> None:
        with self._lock:
            self._outstanding -= count
            if not self._outstanding:
                self._idle.notify_all()

    # ---- one message ----

    def _send_single(self, out: Outgoing, future: SendFuture) -> None:
        tracing = self._inst.tracing

        def ok(reply: SendMessageReply, target: Target) -> None:
            try:
                results = each_result(out, target, reply)
            except FerryError as err:
                fail(err)
                return
            if out.span is not None:
                tracing.end(out.span, address=target.address, queue_id=target.queue.queue_id)
            settle(future._outcome, lambda: results, None)
            self._settled(1)

        def fail(err: FerryError) -> None:
            if out.span is not None:
                tracing.end(out.span, err)
            settle(future._outcome, None, err)
            self._settled(1)

        deadline = time.monotonic() + self._timeout_s
        self.attempt(out, deadline, 0, None, ok, fail, may_block=True)

    # ---- batches ----

    def _build(self, topic: str, items: list[Item]) -> Outgoing:
        inst = self._inst
        return build_batch(topic, items, inst.msg_ids, inst.born_host, self._compress_over)

    def _send_batch(self, topic: str, batch: Batch, *, may_block: bool) -> None:
        items, outcome = batch.items, batch.outcome
        tracing = self._inst.tracing
        outs = [item for item in items if isinstance(item, Outgoing)] if tracing.enabled else []
        try:
            out = self._build(topic, items)
        except (FerryError, ValueError) as exc:  # not expected: the messages were checked
            err = exc if isinstance(exc, FerryError) else FerryError(f"cannot encode: {exc}")
            for part in outs:
                tracing.end(part.span, err)
            settle(outcome, None, err)
            self._batch_finished(topic, len(items))
            return

        def ok(reply: SendMessageReply, target: Target) -> None:
            try:
                checked(reply, out.n_msgs)  # the results are made when first asked for
            except FerryError as err:
                fail(err)
                return
            for part in outs:
                tracing.end(part.span, address=target.address, queue_id=target.queue.queue_id)
            # the results need the ids, not the encoded records: futures held by the caller
            # must not keep ~1.2 KB of payload per message alive with them
            sent = out._replace(payload=b"", span=None)
            settle(outcome, lambda: each_result(sent, target, reply), None)
            self._batch_finished(topic, len(items))

        def fail(err: FerryError) -> None:
            for part in outs:
                tracing.end(part.span, err)
            settle(outcome, None, err)
            self._batch_finished(topic, len(items))

        # the send timeout counts from the batch's first send_async call, not from when the
        # batch leaves: behind a full window of requests to a broker that does not answer,
        # a message would otherwise wait one timeout for a slot and then its own
        deadline = batch.started + self._timeout_s
        self.attempt(out, deadline, 0, None, ok, fail, may_block=may_block)

    def _batch_finished(self, topic: str, count: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._outstanding -= count
            if not self._outstanding:
                self._idle.notify_all()
            acc = self._topics[topic]
            acc.in_flight -= 1
            batches = acc.ready(now, self._window(), self._closing)
        for batch in batches:
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
        if rides_out(err, self._retry_times - attempt, deadline):
            # as SendRetries: wait for the broker that is down, within the send's timeout
            self._publisher.failed(out.topic)
            self._later(
                lambda: self.attempt(out, deadline, attempt, avoid, ok, fail, may_block=True),
                fail,
                delay_s=RECONNECT_PAUSE_S,
            )
            return
        fail(err)

    def _later(self, fn: Callable[[], None], fail: OnError, delay_s: float = 0) -> None:
        if not self._inst.ticker.later(delay_s, fn):
            fail(FerryError("producer shut down before the send was retried"))
