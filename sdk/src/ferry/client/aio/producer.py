"""The asyncio producer: the sync Producer's sends, on zmq.asyncio.

It shares the sync SDK's parts: ProducerSettings (options), Preparer (checks and encoding),
Publisher (queues, round robin, broker avoidance, latency fault tolerance), SendRetries (retry
rules), TopicAccumulator and build_batch (automatic batching), outgoing (requests and
results). Only the waiting is its own.

`send(msg)` without a queue or timeout and `send_async(msg)` go through the automatic
batcher when auto_batch is on (as the sync send_async): messages that many tasks send at once
travel in one request; an idle producer sends each message at once (send() from the caller's
own task, with no batch task in between). Cancelling a task that awaits a send stops the
wait; a message that has already left may still be stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Self

from ferry.client.aio.instance import AsyncClientInstance
from ferry.client.aio.requester import AsyncRequester
from ferry.client.batching import Batch, TopicAccumulator, build_batch
from ferry.client.heartbeats import stamped
from ferry.client.message import Message, MessageExt, MessageQueue, SendResult
from ferry.client.outgoing import Outgoing, each_result, joined_result
from ferry.client.producer_base import ProducerBase
from ferry.client.publish import Publisher, Target, chosen_target, no_route_error, oneway_target
from ferry.client.request_reply import DEFAULT_REQUEST_TIMEOUT_MS
from ferry.client.selector import Selector
from ferry.client.send_retry import SendRetries
from ferry.client.transport import expect
from ferry.protocol.errors import FerryError, TopicNotExistError
from ferry.protocol.messages import HeartbeatRequest, SendMessageReply, UnregisterClientRequest
from ferry.protocol.names import AUTO_CREATE_TOPIC_KEY

log = logging.getLogger("ferry.client.aio.producer")

Chosen = Callable[[Publisher], Target]


class Producer(ProducerBase[AsyncClientInstance]):
    """Sends messages of one producer group from asyncio tasks (one event loop)."""

    # ---- lifecycle ----

    async def start(self) -> None:
        if self._instance is not None:
            return
        inst = self._open(AsyncClientInstance)
        assert self._preparer is not None
        self._topics: dict[str, TopicAccumulator] = {}
        self._waiters: dict[Batch, list[asyncio.Future[SendResult]]] = {}  # by batch, in order
        self._sending: set[asyncio.Future[None]] = set()  # batches in flight
        self._closing = False
        self._requester = AsyncRequester(inst, self._preparer, self._send_request)
        self._instance = inst
        inst.every(self._poll_namesrv_s, inst.routes.refresh_all)
        inst.every(self._heartbeat_s, self.heartbeat)
        # a broker learns of us at once
        inst.routes.on_new_master(lambda addr: inst.spawn(self._heartbeat_to(addr)))

    async def shutdown(self) -> None:
        """Sends what is waiting in batches, waits for it (up to the send timeout), leaves."""
        inst = self._instance
        if inst is None:
            return
        self._closing = True
        for topic, acc in self._topics.items():
            self._launch(topic, acc, flush=True)
        if self._sending:
            await asyncio.wait(list(self._sending), timeout=self.send_timeout_s)
        self._requester.close()
        await self._leave(inst)
        self._instance = None
        await inst.close()

    async def _leave(self, inst: AsyncClientInstance) -> None:
        body = UnregisterClientRequest(client_id=inst.client_id, producer_group=self.group)
        addrs = set(inst.routes.master_addrs().values())
        calls = [inst.connection(addr).request(body, timeout_s=1.0) for addr in addrs]
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, FerryError):
                log.debug("unregister failed: %s", outcome)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.shutdown()

    async def heartbeat(self) -> None:
        """Tells every known broker this client belongs to the group (every 30 s)."""
        inst = self._started()
        for addr in set(inst.routes.master_addrs().values()):
            await self._heartbeat_to(addr)

    async def _heartbeat_to(self, addr: str) -> None:
        inst = self._instance
        if inst is None:
            return
        body = HeartbeatRequest(client_id=inst.client_id, producer_groups=[self.group])
        try:
            await inst.connection(addr).request(stamped(body, inst), timeout_s=inst.api_timeout_s)
        except FerryError as err:
            log.debug("heartbeat to %s failed: %s", addr, err)

    # ---- sends ----

    async def send(
        self,
        msg: Message,
        to: MessageQueue | Selector | int | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """As the sync send(): send(msg), send(msg, timeout_ms), send(msg, queue),
        send(msg, selector, arg); retries within the timeout; raises the typed error."""
        where, arg, timeout_s = self._send_args(to, arg, timeout_ms)
        if where is None:
            if timeout_ms is None and self._batching.enabled:
                if self._idle(msg.topic):
                    return await self._send_batched(msg)
                return await self.send_async(msg)
            out = self._encoder().prepare_one(msg)
            return joined_result(out, *await self._traced(out, timeout_s))
        out = self._encoder().prepare([msg])
        choice = where

        def chosen(pub: Publisher) -> Target:
            return chosen_target(pub, out.topic, msg, choice, arg)

        return joined_result(out, *await self._traced(out, timeout_s, chosen))

    async def send_batch(self, msgs: Iterable[Message]) -> SendResult:
        """Messages of one topic in one request (see the sync send_batch)."""
        out = self._encoder().batch(msgs)
        return joined_result(out, *await self._traced(out, self.send_timeout_s))

    async def send_orderly(self, msg: Message, sharding_key: str | bytes) -> SendResult:
        """The same key goes to the same queue; not retried on another queue."""
        out = self._encoder().prepare([msg])
        return joined_result(
            out,
            *await self._traced(
                out, self.send_timeout_s, lambda pub: pub.orderly_target(out.topic, sharding_key)
            ),
        )

    async def send_oneway(
        self, msg: Message, to: MessageQueue | Selector | None = None, arg: Any = None
    ) -> None:
        """Fire and forget: no reply, no retry. `to`: a queue, or a selector given `arg`."""
        out = self._encoder().prepare([msg])
        inst, publisher = self._parts()
        try:
            await self._route_ready(out.topic)
            target = oneway_target(publisher, out.topic, msg, to, arg, may_block=False)
            await inst.connection(target.address).send_oneway(
                self._request(out, target),
                [out.payload],
                timeout_s=self.send_timeout_s,
                **out.trace,
            )
        except Exception as err:
            inst.tracing.end(out.span, err)
            raise
        inst.tracing.end(out.span, address=target.address, queue_id=target.queue.queue_id)

    def send_async(self, msg: Message) -> asyncio.Future[SendResult]:
        """Starts a send and returns its Future at once; messages of a topic sent this way
        are batched automatically while earlier requests are in flight (auto_batch)."""
        encoder = self._encoder()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[SendResult] = loop.create_future()
        plain = encoder.plain(msg) if self._batching.enabled else None
        if plain is not None:
            self._enqueue(msg.topic, plain, plain.size, waiter)
            return waiter
        out = encoder.prepare_one(msg)
        if self._batching.enabled and out.batchable:
            self._enqueue(out.topic, out, len(out.payload), waiter)
            return waiter
        return asyncio.ensure_future(self._send_alone(out))

    def _idle(self, topic: str) -> bool:
        """Nothing of the topic in flight or waiting (one send at a time, or the first)."""
        acc = self._topics.get(topic)
        if acc is None:
            return not self._closing
        return not (acc.in_flight or acc.waiting is not None or acc.sealed or self._closing)

    async def _send_batched(self, msg: Message) -> SendResult:
        """send(msg) with automatic batching while its topic is _idle: the message goes at
        once from the caller's own task, as a batch of one, with no task and no Future between
        the caller and the reply (busy, it joins the batcher as send_async's messages do)."""
        acc = self._topics.get(msg.topic)
        if acc is None:
            acc = self._topics[msg.topic] = TopicAccumulator(self._batching)
        encoder = self._encoder()
        plain = encoder.plain(msg)
        if plain is not None:
            batch = Batch(time.monotonic(), [plain], plain.size)
        else:
            out = encoder.prepare_one(msg)
            if not out.batchable:
                return await self._send_alone(out)
            batch = Batch(time.monotonic(), [out], len(out.payload))
        acc.in_flight += 1  # what other tasks send meanwhile waits for it, as for a batch
        sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sending.add(sent)  # shutdown waits for it as for a batch's task
        try:
            return (await self._batch_results(msg.topic, batch))[0]
        finally:
            sent.set_result(None)
            self._sending.discard(sent)
            if acc.waiting is None and not acc.sealed:
                acc.in_flight -= 1  # nothing waits: the caller's next send may go alone too
            else:  # as a batch's task ends (see _send_batch)
                asyncio.get_running_loop().call_soon(self._batch_done, msg.topic, acc)

    async def _send_alone(self, out: Outgoing) -> SendResult:
        return await self._send_request(out, self.send_timeout_s)

    async def _send_request(self, out: Outgoing, timeout_s: float) -> SendResult:
        return joined_result(out, *await self._traced(out, timeout_s))

    # ---- request/reply ----

    async def request(
        self, msg: Message, timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    ) -> MessageExt:
        """RocketMQ's request(): sends msg and returns the reply its consumer sends with
        reply(); ReplyTimeoutError when none comes within timeout_ms."""
        self._started()
        return await self._requester.request(msg, timeout_ms)

    # ---- automatic batches ----

    def _enqueue(
        self, topic: str, item: Any, size: int, waiter: asyncio.Future[SendResult]
    ) -> None:
        acc = self._topics.get(topic)
        if acc is None:
            acc = self._topics[topic] = TopicAccumulator(self._batching)
        acc.add(item, size)
        # the batch it joined: still open, or just sealed by it
        batch = acc.waiting if acc.waiting is not None else acc.sealed[-1]
        waiters = self._waiters.get(batch)
        if waiters is None:
            waiters = self._waiters[batch] = []
        waiters.append(waiter)
        if acc.in_flight < self._batching.max_batches_in_flight or self._closing:
            self._launch(topic, acc)

    def _launch(self, topic: str, acc: TopicAccumulator, *, flush: bool = False) -> None:
        """Sends the batches the accumulator lets go now, each in a task of its own."""
        window = 1 << 30 if self._closing else self._batching.max_batches_in_flight
        for batch in acc.ready(time.monotonic(), window, flush or self._closing):
            task = asyncio.create_task(self._send_batch(topic, acc, batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send_batch(self, topic: str, acc: TopicAccumulator, batch: Batch) -> None:
        waiters = self._waiters.pop(batch, [])
        try:
            results = await self._batch_results(topic, batch)
        except FerryError as err:
            for waiter in waiters:
                if not waiter.done():  # a waiter its caller cancelled is left alone
                    waiter.set_exception(err)
        else:
            for waiter, result in zip(waiters, results, strict=True):
                if not waiter.done():
                    waiter.set_result(result)
        finally:
            # after the tasks just woken have run: what they send next joins the batch
            # that leaves now, instead of the first of them leaving alone
            asyncio.get_running_loop().call_soon(self._batch_done, topic, acc)

    async def _batch_results(self, topic: str, batch: Batch) -> list[SendResult]:
        """Sends a batch as one request; the result of each of its messages, in order."""
        inst = self._started()
        tracing = inst.tracing
        items = batch.items
        outs = [i for i in items if isinstance(i, Outgoing)] if tracing.enabled else []
        try:
            out = build_batch(topic, items, inst.msg_ids, inst.born_host, self.compress_over)
            # the send timeout counts from the batch's first message, as the sync batcher's
            remaining = max(1e-3, batch.started + self.send_timeout_s - time.monotonic())
            reply, target = await self._deliver(out, remaining)
            results = each_result(out, target, reply)
        except BaseException as err:  # a batch of one sent by its cancelled caller included
            for part in outs:
                tracing.end(part.span, err if isinstance(err, Exception) else None)
            raise
        for part in outs:
            tracing.end(part.span, address=target.address, queue_id=target.queue.queue_id)
        return results

    def _batch_done(self, topic: str, acc: TopicAccumulator) -> None:
        acc.in_flight -= 1
        if self._instance is not None:
            self._launch(topic, acc)

    # ---- attempts and retries ----

    async def _traced(
        self, out: Outgoing, timeout_s: float, chosen: Chosen | None = None
    ) -> tuple[Target, SendMessageReply]:
        """_deliver, with the message's send span ended by its outcome."""
        tracing = self._started().tracing
        try:
            reply, target = await self._deliver(out, timeout_s, chosen)
        except BaseException as err:
            tracing.end(out.span, err if isinstance(err, Exception) else None)
            raise
        tracing.end(out.span, address=target.address, queue_id=target.queue.queue_id)
        return target, reply

    async def _deliver(
        self, out: Outgoing, timeout_s: float, chosen: Chosen | None = None
    ) -> tuple[SendMessageReply, Target]:
        """Sends with the sync producer's retry rules (SendRetries)."""
        _, publisher = self._parts()
        retries = SendRetries(out.topic, self.retry_times, timeout_s)
        for budget in retries:
            target: Target | None = None
            remaining = budget
            if retries.pause_s:  # waiting for a broker that is down to come back
                await asyncio.sleep(min(retries.pause_s, budget))
                remaining = max(retries.left(), 1e-3)
            try:
                await self._route_ready(out.topic)
                if chosen is None:
                    target = publisher.next_target(out.topic, retries.avoid, may_block=False)
                    if target is None:  # the fallback route expired meanwhile
                        continue
                else:
                    target = chosen(publisher)
                return await self._attempt(out, target, remaining), target
            except FerryError as err:
                if not retries.failed(err, publisher, target):
                    break
        raise retries.final_error()

    async def _attempt(self, out: Outgoing, target: Target, timeout_s: float) -> SendMessageReply:
        inst = self._started()
        started = time.monotonic()
        broker = target.queue.broker_name
        try:
            result = await inst.connection(target.address).request(
                self._request(out, target), [out.payload], timeout_s=timeout_s, **out.trace
            )
        except FerryError as err:
            self._faults.update(broker, 0, failed=err.retriable)
            raise
        self._faults.update(broker, (time.monotonic() - started) * 1000)
        return expect(result, SendMessageReply)

    async def _route_ready(self, topic: str) -> None:
        """Fetches the topic's route unless the Publisher has one (its own, or TBW102's for a
        topic a broker will create), so that its choices never ask the name servers."""
        _, publisher = self._parts()
        if publisher.route(topic, may_block=False) is not None:
            return
        routes = self._started().routes
        try:
            await routes.fetch_route(topic)
        except TopicNotExistError:
            try:
                default = await routes.ensure(AUTO_CREATE_TOPIC_KEY)
            except TopicNotExistError:
                raise no_route_error(topic) from None
            publisher.use_fallback(topic, default)
