"""Asynchronous sends with automatic batching (RocketMQ 5's autoBatch: count, bytes, linger).

Messages of a topic wait in an accumulator and leave as batches, one request and one frame
each, at most `max_batches_in_flight` requests per topic at a time:
- a full batch (max_count messages, or max_bytes) leaves as soon as the window allows;
- a partial one leaves when nothing of its topic is in flight (so an idle producer sends each
  message at once), or once its first message has waited `linger_s`: checked whenever a
  message is added or a request completes. No timer: a partial batch is only held while
  requests are in flight, and each of those completes (or fails at its deadline) and checks.
Under load that forms full batches; in between, a batch holds what arrived during one round
trip, as Nagle's algorithm does, so the request rate stays near one per round trip. (A linger
timer cost the timer thread two wake-ups per held batch: at 2,000 msg/s, +1.8 context
switches per message.)

Every message gets a SendFuture reading its batch's Outcome (one lock, one state) through
Future's public methods; a batch is settled by one assignment under that lock, and its
SendResults are made when one is first asked for, so the I/O thread spends nothing per
message on completion. Completions arrive on an
I/O thread; anything that may block (a route lookup after a failure, a retry) runs on the
client's timer thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from ferry.client.instance import ClientInstance
from ferry.client.message import PlainMessage, SendResult, encode_plain_batch
from ferry.client.msg_id import MessageIdGenerator
from ferry.client.outgoing import Outgoing, checked, each_result, send_request
from ferry.client.publish import Publisher, Target
from ferry.client.transport import Result, expect
from ferry.protocol.errors import FerryError, RequestTimeoutError
from ferry.protocol.messages import SendMessageReply

log = logging.getLogger("ferry.client.producer")

OnReply = Callable[[SendMessageReply, Target], None]
OnError = Callable[[FerryError], None]


@dataclass(frozen=True)
class BatchConfig:
    enabled: bool = True
    max_count: int = 256
    max_bytes: int = 512 * 1024
    max_batches_in_flight: int = 4  # per topic
    linger_s: float = 0.005


class Outcome:
    """What the futures of one batch share: a lock, whether it is done, an error, and the
    results, made the first time one is asked for. Settling a batch is then one assignment
    under the lock, whatever its size, and a caller that never asks for a result never pays
    for it."""

    __slots__ = ("_make", "_results", "callbacks", "cond", "done", "error", "with_base")

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.done = False
        self.error: BaseException | None = None
        self._make: Callable[[], list[SendResult]] | None = None
        self._results: list[SendResult] | None = None
        # made on first use (most batches get neither): callbacks to call when settled, and
        # the futures whose Future part was made, to finish too
        self.callbacks: list[tuple[SendFuture, Callable[[Future[SendResult]], object]]] | None
        self.callbacks = None
        self.with_base: list[SendFuture] | None = None

    def result(self, index: int) -> SendResult:
        results = self._results
        if results is None:
            make = self._make
            if make is None:  # a reader that lost a race with another first asker
                results = self._results
                assert results is not None
                return results[index]
            results = make()  # two first askers may both make them: equal lists
            self._results = results
            self._make = None  # what made them (the reply, the ids) is not needed again
        return results[index]


class SendFuture(Future[SendResult]):
    """A send_async result: a concurrent.futures.Future whose public methods read its batch's
    Outcome, so that settle() finishes every future of a batch at once.

    Future's own state (its condition, state and waiter lists) costs a Condition and a locked
    set_result per message, more than a send_async message otherwise costs in all; it is made
    only for code that reads it directly instead of through the methods, which
    concurrent.futures.wait and as_completed do: on such a read, Future.__init__ makes it and
    Future's public set_result or set_exception finish it from the outcome (at once, or when
    the batch settles). Those two then cost 3-10 µs a future (bench/send_futures.py); result()
    in order stays the fast way to read a batch. Already running: cancel() is refused, as for
    any send that may have left.
    """

    _with_base = False  # Future.__init__ has run (see __getattr__)

    def __init__(self, outcome: Outcome, index: int) -> None:  # Future.__init__: when needed
        self._outcome = outcome
        self._index = index

    def result(self, timeout: float | None = None) -> SendResult:
        outcome = self._outcome
        if not outcome.done:
            self._wait(timeout)
        if outcome.error is not None:
            raise outcome.error
        return outcome.result(self._index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._outcome.done:
            self._wait(timeout)
        return self._outcome.error

    def _wait(self, timeout: float | None) -> None:
        outcome = self._outcome
        with outcome.cond:
            if not outcome.cond.wait_for(lambda: outcome.done, timeout):
                raise FutureTimeout()

    def done(self) -> bool:
        return self._outcome.done

    def running(self) -> bool:
        return not self._outcome.done

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False  # it may have left already

    def set_running_or_notify_cancel(self) -> bool:
        return True  # running from the start

    def add_done_callback(self, fn: Callable[[Future[SendResult]], object]) -> None:
        outcome = self._outcome
        with outcome.cond:
            if not outcome.done:
                if outcome.callbacks is None:
                    outcome.callbacks = []
                outcome.callbacks.append((self, fn))
                return
        _call(fn, self)  # done already: now, as Future does

    def set_result(self, result: SendResult) -> None:
        raise _settled_with_batch()

    def set_exception(self, exception: BaseException | None) -> None:
        raise _settled_with_batch()

    def __repr__(self) -> str:
        outcome = self._outcome
        if not outcome.done:
            state = "running"
        elif outcome.error is not None:
            state = f"raised {type(outcome.error).__name__}"
        else:
            state = "finished"
        return f"<SendFuture at {id(self):#x} state={state}>"

    def __getattr__(self, name: str) -> Any:
        # Only attributes not found otherwise come here: Future's own, before it is made.
        if name not in _FUTURE_STATE or self._with_base:
            raise AttributeError(name)
        self._make_base()
        return object.__getattribute__(self, name)

    def _make_base(self) -> None:
        outcome = self._outcome
        with outcome.cond:
            if self._with_base:
                return
            Future.__init__(self)  # left pending: cancel() and running() are this class's
            self._with_base = True
            if not outcome.done:  # settle() finishes it
                if outcome.with_base is None:
                    outcome.with_base = []
                outcome.with_base.append(self)
                return
        _finish_base(self)


# What Future.__init__ gives an instance, read from a real Future rather than named here.
_FUTURE_STATE = frozenset(vars(Future()))


def _finish_base(future: SendFuture) -> None:
    """Future's own state of `future`, finished as its settled outcome says."""
    outcome = future._outcome
    if outcome.error is not None:
        Future.set_exception(future, outcome.error)
    else:
        Future.set_result(future, outcome.result(future._index))


def _call(fn: Callable[[Future[SendResult]], object], future: SendFuture) -> None:
    try:
        fn(future)
    except Exception:
        log.exception("callback of send_async failed")


def _settled_with_batch() -> AttributeError:
    # set_result() and friends: a send_async future finishes with its batch, never alone
    return AttributeError("a send_async future is settled by its batch, not set alone")


def settle(
    outcome: Outcome,
    results: Callable[[], list[SendResult]] | None,
    error: FerryError | None,
) -> None:
    """Finishes every future of an outcome: with the results `results()` makes when one is
    first asked for (in order), or all with error."""
    with outcome.cond:
        outcome._make = results
        outcome.error = error
        outcome.done = True
        with_base, callbacks = outcome.with_base, outcome.callbacks
        outcome.with_base = outcome.callbacks = None
        outcome.cond.notify_all()
    for future in with_base or ():
        _finish_base(future)
    for future, fn in callbacks or ():
        _call(fn, future)


# A message waiting in a batch: encoded already (Outgoing), or a plain message encoded with
# the rest of its batch when the batch leaves.
Item = Outgoing | PlainMessage


@dataclass(eq=False)
class Batch:
    started: float  # monotonic time of its first message
    items: list[Item] = field(default_factory=list)
    size: int = 0
    outcome: Outcome = field(default_factory=Outcome)  # what its futures read


@dataclass(eq=False)
class TopicAccumulator:
    """Messages of one topic waiting to go out; plain state, guarded by the sender's lock."""

    config: BatchConfig
    waiting: Batch | None = None
    sealed: collections.deque[Batch] = field(default_factory=collections.deque)
    in_flight: int = 0

    def add(self, item: Item, size: int, now: float | None = None) -> SendFuture:
        """Queues a message of `size` bytes encoded; its future shares the lock of the batch
        it joins. `now` (monotonic, read when None) starts a new batch's linger."""
        config = self.config
        batch = self.waiting
        if batch is not None and batch.size + size > config.max_bytes:
            self.seal()  # a batch never grows past max_bytes (kept under maxMessageSize)
            batch = None
        if batch is None:
            batch = self.waiting = Batch(time.monotonic() if now is None else now)
        future = SendFuture(batch.outcome, len(batch.items))  # its index among the results
        batch.items.append(item)
        batch.size += size
        if len(batch.items) >= config.max_count or batch.size >= config.max_bytes:
            self.seal()
        return future

    def seal(self) -> None:
        if self.waiting is not None:
            self.sealed.append(self.waiting)
            self.waiting = None

    def ready(self, now: float, window: int, flush: bool = False) -> list[Batch]:
        """Batches to send now (counted as in flight): full ones while the window allows; the
        partial one when nothing is in flight, its linger is over, or on flush."""
        out: list[Batch] = []
        while self.in_flight < window:
            if self.sealed:
                batch = self.sealed.popleft()
            elif self.waiting is not None and (
                flush or self.in_flight == 0 or now - self.waiting.started >= self.config.linger_s
            ):
                batch, self.waiting = self.waiting, None
            else:
                break
            self.in_flight += 1
            out.append(batch)
        return out


def build_batch(
    topic: str,
    items: list[Item],
    msg_ids: MessageIdGenerator,
    born_host: bytes,
    compress_over: int,
) -> Outgoing:
    """One request of a batch: plain messages encoded (ids made) now, in runs."""
    if len(items) == 1 and isinstance(items[0], Outgoing):
        return items[0]
    ids: list[str] = []
    payloads: list[bytes] = []
    run: list[PlainMessage] = []
    born = int(time.time() * 1000)

    def encode_run() -> None:
        run_ids = msg_ids.next_ids(len(run))
        payloads.append(
            encode_plain_batch(
                topic,
                run,
                run_ids,
                born_timestamp=born,
                born_host=born_host,
                compress_over=compress_over,
            )
        )
        ids.extend(run_ids)
        run.clear()

    for item in items:
        if isinstance(item, PlainMessage):
            run.append(item)
            continue
        if run:
            encode_run()
        ids.extend(item.msg_ids)
        payloads.append(item.payload)
    if run:
        encode_run()
    first = items[0]
    if isinstance(first, PlainMessage):
        return Outgoing(topic, ids, b"".join(payloads), len(ids), "", "", None, True)
    parent, state = first.traceparent, first.tracestate  # the envelope carries the first's
    return Outgoing(topic, ids, b"".join(payloads), len(ids), parent, state, None, True)


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
        fail(err)

    def _later(self, fn: Callable[[], None], fail: OnError) -> None:
        if not self._inst.ticker.later(0, fn):
            fail(FerryError("producer shut down before the send was retried"))
