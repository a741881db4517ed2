"""Producer.request for asyncio: request_reply's messages, polls and ReplyMatcher (shared
with the sync Requester), one polling task per broker while requests wait there.

A request whose caller is cancelled is removed from the matcher at once; its reply, if it
comes, is dropped as a late one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ferry.client.aio.instance import AsyncClientInstance
from ferry.client.message import Message, MessageExt, SendResult
from ferry.client.outgoing import Outgoing
from ferry.client.prepare import Preparer
from ferry.client.request_reply import (
    POLL_RETRY_S,
    ReplyMatcher,
    check_timeout_ms,
    decode_replies,
    new_reply_key,
    poll_request,
    request_message,
)
from ferry.client.transport import expect
from ferry.protocol.errors import FerryError, IllegalStateError, TopicNotExistError
from ferry.protocol.messages import PollRepliesReply

log = logging.getLogger("ferry.client.aio.request")

Send = Callable[[Outgoing, float], Awaitable[SendResult]]


class AsyncRequester:
    """One per producer: its reply key, the requests waiting and the polling tasks."""

    def __init__(self, inst: AsyncClientInstance, preparer: Preparer, send: Send) -> None:
        self._inst = inst
        self._preparer = preparer
        self._send = send
        self.reply_to = new_reply_key(inst.client_id)
        self.matcher: ReplyMatcher[asyncio.Future[MessageExt]] = ReplyMatcher()
        self._polling: set[str] = set()
        self._closed = False

    async def request(self, msg: Message, timeout_ms: int) -> MessageExt:
        if self._closed:
            raise IllegalStateError("producer is shut down")
        check_timeout_ms(timeout_ms)
        request, correlation_id = request_message(msg, self.reply_to, timeout_ms)
        out = self._preparer.prepare([request])._replace(request_reply=True, batchable=False)
        waiter: asyncio.Future[MessageExt] = asyncio.get_running_loop().create_future()
        self.matcher.add(correlation_id, waiter, timeout_ms)
        timeout_s = timeout_ms / 1000
        try:
            async with asyncio.timeout(timeout_s):
                sent = await self._send(out, timeout_s)
                broker = self._inst.routes.addr_of(sent.queue.broker_name)
                if broker is None:
                    raise TopicNotExistError(f"no address for broker {sent.queue.broker_name}")
                if self.matcher.sent(correlation_id, broker):
                    self._ensure_poll(broker)
                return await waiter
        except TimeoutError:
            timed_out = self.matcher.timed_out(correlation_id)
            if timed_out is not None:
                raise timed_out[1] from None
            raise
        finally:
            self.matcher.fail(correlation_id)  # still waiting: failed, cancelled, timed out

    def close(self) -> None:
        self._closed = True
        for waiter in self.matcher.drain():
            if not waiter.done():
                waiter.set_exception(IllegalStateError("producer shut down before the reply came"))

    def _ensure_poll(self, broker: str) -> None:
        if broker not in self._polling and not self._closed:
            self._polling.add(broker)
            self._inst.spawn(self._poll(broker))

    async def _poll(self, broker: str) -> None:
        """Keeps one poll held at `broker` while the matcher wants it (see requester.py)."""
        try:
            while not self._closed and self.matcher.keep_polling(broker):
                body, timeout_s = poll_request(self.reply_to)
                try:
                    result = await self._inst.connection(broker).request(body, timeout_s=timeout_s)
                    replies = decode_replies(expect(result, PollRepliesReply), result[1])
                except FerryError as err:
                    if err.retriable:
                        log.debug("reply poll at %s failed, again soon: %s", broker, err)
                        await asyncio.sleep(POLL_RETRY_S)
                        continue
                    for waiter in self.matcher.fail_broker(broker):
                        if not waiter.done():
                            waiter.set_exception(err)
                    return
                for reply in replies:
                    matched = self.matcher.match(reply)
                    if matched is not None and not matched.done():
                        matched.set_result(reply)
        finally:
            self._polling.discard(broker)
