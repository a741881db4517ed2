"""Producer.request / request_async: send a request, wait for the reply its replier sends.

A request is sent as any message is (with the producer's retries), flagged so that the broker
stamps where the reply must come back: to itself. The requester then keeps one poll held at
each broker its requests went through (PollRepliesRequest on the connection's I/O thread);
every answer brings the replies that arrived, which are matched to their requests by
correlation id (request_reply.ReplyMatcher), and the next poll goes out at once. A broker is
polled while requests wait there and for POLL_LINGER_S after the last one, so a steady
requester always finds a poll held. A request with no reply by its timeout fails with
ReplyTimeoutError; its reply, if it comes later, is dropped.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, InvalidStateError, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from ferry.client.instance import ClientInstance
from ferry.client.message import Message, MessageExt, SendResult
from ferry.client.outgoing import Outgoing
from ferry.client.request_reply import (
    POLL_RETRY_S,
    ReplyMatcher,
    RequestCallback,
    check_timeout_ms,
    decode_replies,
    new_reply_key,
    poll_request,
    request_message,
)
from ferry.client.transport import Result, expect
from ferry.protocol.errors import FerryError, IllegalStateError, TopicNotExistError
from ferry.protocol.messages import PollRepliesReply

log = logging.getLogger("ferry.client.request")

CALLBACK_THREADS = 4

Prepare = Callable[[Sequence[Message]], Outgoing]
SendSync = Callable[[Outgoing, float], SendResult]
Submit = Callable[[Outgoing], "Future[SendResult]"]


class Requester:
    """One per producer: its reply key, the requests waiting and the polls held."""

    def __init__(
        self, inst: ClientInstance, prepare: Prepare, send_sync: SendSync, submit: Submit
    ) -> None:
        self._inst = inst
        self._prepare = prepare
        self._send_sync = send_sync
        self._submit = submit
        self.reply_to = new_reply_key(inst.client_id)
        self.matcher: ReplyMatcher[Future[MessageExt]] = ReplyMatcher()
        self._lock = threading.Lock()
        self._polling: set[str] = set()
        self._callbacks: ThreadPoolExecutor | None = None
        self._closed = False

    # ---- callers ----

    def request(self, msg: Message, timeout_ms: int) -> MessageExt:
        future, correlation_id, out = self._start(msg, timeout_ms)
        timeout_s = timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        try:
            sent = self._send_sync(out, timeout_s)
        except FerryError:
            self.matcher.fail(correlation_id)
            raise
        self._sent(correlation_id, sent)
        try:
            return future.result(max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            timed_out = self.matcher.timed_out(correlation_id)
            if timed_out is not None:
                raise timed_out[1] from None
            return future.result(0)  # the reply came in the meantime

    def request_async(
        self, msg: Message, callback: RequestCallback | None, timeout_ms: int
    ) -> Future[MessageExt]:
        future, correlation_id, out = self._start(msg, timeout_ms)
        if callback is not None:
            future.add_done_callback(lambda f: self._call_back(callback, f))
        if not self._inst.ticker.later(timeout_ms / 1000, lambda: self._expire(correlation_id)):
            self._settle(future, IllegalStateError("producer is shut down"))
            return future
        try:
            sending = self._submit(out)
        except FerryError as err:
            self.matcher.fail(correlation_id)
            self._settle(future, err)
            return future
        sending.add_done_callback(lambda f: self._on_sent(correlation_id, f))
        return future

    def close(self) -> None:
        """Fails every request still waiting (the producer shuts down)."""
        with self._lock:
            self._closed = True
        for future in self.matcher.drain():
            self._settle(future, IllegalStateError("producer shut down before the reply came"))
        if self._callbacks is not None:
            self._callbacks.shutdown(wait=False)

    # ---- sending ----

    def _start(self, msg: Message, timeout_ms: int) -> tuple[Future[MessageExt], str, Outgoing]:
        if self._closed:
            raise IllegalStateError("producer is shut down")
        check_timeout_ms(timeout_ms)
        request, correlation_id = request_message(msg, self.reply_to, timeout_ms)
        out = self._prepare([request])._replace(request_reply=True, batchable=False)
        future: Future[MessageExt] = Future()
        self.matcher.add(correlation_id, future, timeout_ms)
        return future, correlation_id, out

    def _on_sent(self, correlation_id: str, sending: Future[SendResult]) -> None:
        try:
            sent = sending.result()
        except BaseException as err:  # noqa: BLE001 - handed to the caller's future
            future = self.matcher.fail(correlation_id)
            if future is not None:
                self._settle(future, err)
            return
        try:
            self._sent(correlation_id, sent)
        except FerryError as err:
            future = self.matcher.fail(correlation_id)
            if future is not None:
                self._settle(future, err)

    def _sent(self, correlation_id: str, sent: SendResult) -> None:
        """The request is stored: its reply comes through the broker that took it."""
        broker = self._inst.routes.addr_of(sent.queue.broker_name)
        if broker is None:
            raise TopicNotExistError(f"no address for broker {sent.queue.broker_name}")
        if self.matcher.sent(correlation_id, broker):
            self._ensure_poll(broker)

    def _expire(self, correlation_id: str) -> None:
        timed_out = self.matcher.timed_out(correlation_id)
        if timed_out is not None:
            self._settle(*timed_out)

    # ---- polls (I/O threads) ----

    def _ensure_poll(self, broker: str) -> None:
        with self._lock:
            if broker in self._polling or self._closed:
                return
            self._polling.add(broker)
        self._poll(broker)

    def _poll(self, broker: str) -> None:
        try:
            body, timeout_s = poll_request(self.reply_to)
            polling = self._inst.connection(broker).submit(body, timeout_s=timeout_s)
        except FerryError as err:
            self._poll_failed(broker, err)
            return
        polling.add_done_callback(lambda f: self._polled(broker, f))

    def _polled(self, broker: str, polling: Future[Result]) -> None:
        try:
            body, payload = polling.result()
            replies = decode_replies(expect((body, payload), PollRepliesReply), payload)
        except CancelledError:
            self._stop_polling(broker)
            return
        except FerryError as err:
            self._poll_failed(broker, err)
            return
        for reply in replies:
            future = self.matcher.match(reply)
            if future is not None:
                with contextlib.suppress(InvalidStateError):
                    future.set_result(reply)
        if self._keep_polling(broker):
            self._poll(broker)

    def _keep_polling(self, broker: str) -> bool:
        """Checked under the lock _ensure_poll takes, so a request sent meanwhile is never
        left without a poll."""
        with self._lock:
            if not self._closed and self.matcher.keep_polling(broker):
                return True
            self._polling.discard(broker)
            return False

    def _stop_polling(self, broker: str) -> None:
        with self._lock:
            self._polling.discard(broker)

    def _poll_failed(self, broker: str, err: FerryError) -> None:
        if err.retriable:  # the broker restarts, is busy, the connection drops: poll again
            if self._keep_polling(broker):
                log.debug("reply poll at %s failed, again in %.1fs: %s", broker, POLL_RETRY_S, err)
                if not self._inst.ticker.later(POLL_RETRY_S, lambda: self._poll(broker)):
                    self._stop_polling(broker)
            return
        # refused for good (no permission to take replies, a broker without request/reply):
        # the requests waiting there cannot have their replies
        self._stop_polling(broker)
        waiting = self.matcher.fail_broker(broker)
        if waiting:
            log.warning("replies cannot be taken from %s: %s", broker, err)
        for future in waiting:
            self._settle(future, err)

    # ---- outcomes ----

    @staticmethod
    def _settle(future: Future[MessageExt], err: BaseException) -> None:
        with contextlib.suppress(InvalidStateError):
            future.set_exception(err)

    def _call_back(self, callback: RequestCallback, future: Future[MessageExt]) -> None:
        """Runs the caller's callback off the I/O thread that completed the future."""
        with self._lock:
            if self._callbacks is None:
                self._callbacks = ThreadPoolExecutor(
                    CALLBACK_THREADS, thread_name_prefix="ferry-request-callback"
                )
            pool = self._callbacks
        try:
            pool.submit(_run_callback, callback, future)
        except RuntimeError:  # shut down: run it here rather than never
            _run_callback(callback, future)


def _run_callback(callback: RequestCallback, future: Future[MessageExt]) -> None:
    try:
        error = future.exception()
        if error is None:
            callback.on_success(future.result())
        else:
            callback.on_exception(error)
    except Exception:
        log.exception("request callback failed")
