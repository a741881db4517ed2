"""The push consumer for asyncio: an async listener, or `async for msg in consumer`.

Pulling, rebalancing, offsets, retries (RECONSUME_LATER through %RETRY%, the DLQ after
max_reconsume_times) and orderly locks are the sync PushConsumer's, unchanged: it runs its
engine on its own threads, and each batch it would hand a listener is handed to this loop
instead. So an async listener has the sync one's semantics, concurrently (up to
consume_thread_nums batches at a time) or orderly (one batch per queue at a time, in order).

In the iterator form a message counts as consumed when the loop asks for the next one after
it (the body of `async for` finished); messages a loop left unfinished are consumed again
later (RECONSUME_LATER at shutdown). Cancelling the task that iterates loses nothing.
After shutdown, `async for` ends (StopAsyncIteration), including one waiting at the time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Self

from ferry.client.aio.threaded import threaded
from ferry.client.message import ConsumeResult, MessageExt
from ferry.client.message_selector import Expression
from ferry.client.push_consumer import PushConsumer as SyncPushConsumer
from ferry.protocol.errors import IllegalStateError

AsyncListener = Callable[[list[MessageExt]], Coroutine[Any, Any, ConsumeResult]]


class _Delivery:
    """A batch the engine waits on, read message by message by the iterator."""

    def __init__(self, msgs: list[MessageExt]) -> None:
        self.msgs = msgs
        self.next = 0
        self.done: concurrent.futures.Future[ConsumeResult] = concurrent.futures.Future()

    def finish(self, result: ConsumeResult) -> None:
        if not self.done.done():
            self.done.set_result(result)


class PushConsumer:
    """ferry.client.PushConsumer's options and rules; started and used from one loop."""

    def __init__(self, group: str, namesrv: str, *args: Any, **options: Any) -> None:
        self._engine = SyncPushConsumer(group, namesrv, *args, **options)
        self.group = group
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: AsyncListener | None = None
        self._inbox: asyncio.Queue[_Delivery | None] | None = None  # None: shut down
        self._stopped = False
        self._current: _Delivery | None = None
        self._waiting: set[_Delivery] = set()

    def subscribe(self, topic: str, expression: Expression = "*") -> None:
        self._engine.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self._engine.unsubscribe(topic)

    def register_listener(self, listener: AsyncListener, *, orderly: bool = False) -> None:
        """An async fn(msgs) -> ConsumeResult, awaited on this consumer's loop."""
        self._listener = listener
        self._engine.register_listener(self._consume, orderly=orderly)

    async def start(self) -> None:
        self._stopped = False
        self._loop = asyncio.get_running_loop()
        if self._listener is None:  # the iterator form
            self._inbox = asyncio.Queue()
            self._engine.register_listener(self._consume, orderly=False)
        await asyncio.to_thread(self._engine.start)

    async def shutdown(self) -> None:
        """Stops the engine; batches not consumed yet are offered again later. An iterator
        (`async for`, waiting or not) ends."""
        self._stopped = True
        self._current = None  # its batch is offered again: the rest of it is not ours
        if self._inbox is not None:
            self._inbox.put_nowait(None)  # wakes an iterator that waits
        for delivery in list(self._waiting):
            delivery.finish(ConsumeResult.RECONSUME_LATER)
        await asyncio.to_thread(self._engine.shutdown)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.shutdown()

    def _sync(self) -> SyncPushConsumer:
        return self._engine

    reply = threaded(SyncPushConsumer.reply, _sync)  # the sync consumer's, in a worker thread

    @property
    def client_id(self) -> str:
        return self._engine.client_id

    # ---- the engine's listener (a consume thread) ----

    def _consume(self, msgs: list[MessageExt]) -> ConsumeResult:
        loop = self._loop
        if loop is None or loop.is_closed():
            return ConsumeResult.RECONSUME_LATER
        if self._listener is not None:
            try:
                running: concurrent.futures.Future[ConsumeResult]
                running = asyncio.run_coroutine_threadsafe(self._listener(msgs), loop)
            except RuntimeError:  # the loop is closing
                return ConsumeResult.RECONSUME_LATER
            return running.result()  # a listener's failure: the engine's rules apply
        delivery = _Delivery(msgs)
        self._waiting.add(delivery)
        try:
            loop.call_soon_threadsafe(self._deliver, delivery)
            return delivery.done.result()
        except RuntimeError:
            return ConsumeResult.RECONSUME_LATER
        finally:
            self._waiting.discard(delivery)

    def _deliver(self, delivery: _Delivery) -> None:
        assert self._inbox is not None
        if self._stopped:  # reached the loop after shutdown: no iterator will take it
            delivery.finish(ConsumeResult.RECONSUME_LATER)
            return
        self._inbox.put_nowait(delivery)

    # ---- the iterator form ----

    def __aiter__(self) -> AsyncIterator[MessageExt]:
        return self

    async def __anext__(self) -> MessageExt:
        """The next message; the one before it counts as consumed. StopAsyncIteration once
        the consumer is shut down."""
        if self._stopped:
            raise StopAsyncIteration
        if self._inbox is None:
            raise IllegalStateError(
                "iterate a started consumer without a listener (register_listener or async for)"
            )
        current = self._current
        if current is not None and current.next >= len(current.msgs):
            current.finish(ConsumeResult.SUCCESS)
            current = self._current = None
        if current is None:
            got = await self._inbox.get()
            if got is None or self._stopped:
                raise StopAsyncIteration
            current = self._current = got
        msg = current.msgs[current.next]
        current.next += 1
        return msg

    async def receive(self, timeout: float) -> MessageExt | None:
        """The next message, or None after `timeout` seconds (as __anext__ otherwise)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                return await self.__anext__()
        return None
