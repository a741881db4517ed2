"""ferry.client.aio through its public API against one real local cluster: sends and
consumes, automatic batches, transactions and their checks, admin calls, the sync SDK's
errors, and tasks cancelled mid-flight leaving the clients usable."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from itest_support import Cluster
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ferry.admin.aio import Admin
from ferry.client import (
    ConnectionFailedError,
    ConsumeFromWhere,
    ConsumeResult,
    FerryError,
    InvalidReceiptHandleError,
    LocalTransactionState,
    Message,
    MessageExt,
    MessageQueue,
    ReplyTimeoutError,
    SendStatus,
    TopicNotExistError,
)
from ferry.client import Producer as SyncProducer
from ferry.client.aio import Producer, PushConsumer, SimpleConsumer, TransactionProducer
from ferry.runtime.testing.cluster import running_cluster

pytestmark = pytest.mark.integration

T = TypeVar("T")

# half messages checked back after 1 s (the default is a minute); no topic made on first send
SETTINGS = {
    "transactionTimeOut": "1000",
    "transactionCheckInterval": "300",
    "autoCreateTopicEnable": "false",
}
TOPICS = (
    "AioOrders",
    "AioBatched",
    "AioTx",
    "AioListen",
    "AioCancel",
    "AioPop",
    "AioAsk",
    "AioTraced",
    "AioStop",
    "AioAskPop",
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("aio")), overrides=SETTINGS) as c:
        asyncio.run(_create_topics(c.namesrv))
        yield c


async def _create_topics(namesrv: str) -> None:
    async with Admin(namesrv) as admin:
        for topic in TOPICS:
            await admin.create_topic(topic, 4, 4)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _take(consumer: PushConsumer, want: int, timeout: float = 20) -> list[MessageExt]:
    got: list[MessageExt] = []
    async with asyncio.timeout(timeout):
        async for msg in consumer:
            got.append(msg)
            if len(got) == want:
                break
    return got


def test_messages_sent_from_tasks_come_back_through_async_for(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with Producer("aio-pg", cluster.namesrv) as producer:
            one = await producer.send(Message("AioOrders", b"first", tags="A", keys=["k1"]))
            assert one.status is SendStatus.SEND_OK
            queue = MessageQueue("AioOrders", one.queue.broker_name, 2)
            to_queue = await producer.send(Message("AioOrders", b"to-queue"), queue)
            assert to_queue.queue == queue
            picked = await producer.send(
                Message("AioOrders", b"selected"), lambda mqs, _m, arg: mqs[arg], 3
            )
            assert picked.queue.queue_id == 3
            batch = await producer.send_batch([Message("AioOrders", b"b%d" % i) for i in range(5)])
            assert len(batch.msg_id.split(",")) == 5
            await producer.send_oneway(Message("AioOrders", b"oneway"))
        consumer = PushConsumer(
            "aio-cg", cluster.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
        )
        consumer.subscribe("AioOrders")
        async with consumer:
            got = await _take(consumer, 9)
        bodies = sorted(m.body for m in got)
        assert bodies == sorted(
            [b"first", b"to-queue", b"selected", b"oneway", *(b"b%d" % i for i in range(5))]
        )
        first = next(m for m in got if m.body == b"first")
        assert (first.tags, first.keys, first.msg_id) == ("A", ["k1"], one.msg_id)

    run(scenario())


def test_concurrent_sends_travel_in_automatic_batches(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with Producer("aio-pg-batch", cluster.namesrv, batch_linger_ms=50) as producer:
            results = await asyncio.gather(
                *(producer.send(Message("AioBatched", b"m%d" % i)) for i in range(2000))
            )
            assert all(r.status is SendStatus.SEND_OK for r in results)
            assert len({r.msg_id for r in results}) == 2000
            # a batch's messages share one request: consecutive offsets in one queue, and
            # far fewer requests than messages (each request is one (queue, offset) run)
            runs = {(r.queue, r.queue_offset - i) for i, r in enumerate(results)}
            assert len(runs) < 200
            futures = [producer.send_async(Message("AioBatched", b"x")) for _ in range(500)]
            done = await asyncio.gather(*futures)
            assert len(done) == 500
        async with Admin(cluster.namesrv) as admin:
            queues = await admin.queues("AioBatched")
            stored = sum([await admin.max_offset(q) for q in queues])
        assert stored == 2500

    run(scenario())


class _Bank:
    def __init__(self) -> None:
        self.checked: asyncio.Queue[str] = asyncio.Queue()

    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        await asyncio.sleep(0)  # wait-ok: a turn of the loop, not a wait
        return arg  # type: ignore[no-any-return]

    async def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        await self.checked.put(msg.body.decode())
        return LocalTransactionState.COMMIT


def test_transactions_commit_roll_back_and_answer_checks(cluster: Cluster) -> None:
    async def scenario() -> None:
        bank = _Bank()
        async with TransactionProducer("aio-tx", cluster.namesrv, bank) as producer:
            committed = await producer.send_in_transaction(
                Message("AioTx", b"commit"), LocalTransactionState.COMMIT
            )
            assert committed.local_transaction_state is LocalTransactionState.COMMIT
            await producer.send_in_transaction(
                Message("AioTx", b"rollback"), LocalTransactionState.ROLLBACK
            )
            unknown = await producer.send_in_transaction(
                Message("AioTx", b"unknown"), LocalTransactionState.UNKNOWN
            )
            assert unknown.local_transaction_state is LocalTransactionState.UNKNOWN
            async with asyncio.timeout(20):
                assert await bank.checked.get() == "unknown"  # the broker asked back
            consumer = PushConsumer(
                "aio-tx-cg", cluster.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
            )
            consumer.subscribe("AioTx")
            async with consumer:
                got = await _take(consumer, 2)
                assert sorted(m.body for m in got) == [b"commit", b"unknown"]
                # the rolled back one never comes
                assert await consumer.receive(1.5) is None

    run(scenario())


def test_an_async_listener_consumes_and_a_failed_batch_comes_back(cluster: Cluster) -> None:
    async def scenario() -> None:
        seen: list[tuple[bytes, int]] = []
        done = asyncio.Event()

        async def listener(msgs: list[MessageExt]) -> ConsumeResult:
            for msg in msgs:
                seen.append((msg.body, msg.reconsume_times))
            if any(m.body == b"flaky" and m.reconsume_times == 0 for m in msgs):
                return ConsumeResult.RECONSUME_LATER
            if len(seen) >= 3:
                done.set()
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            "aio-listen-cg",
            cluster.namesrv,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
            retry_later_ms=100,
        )
        consumer.subscribe("AioListen")
        consumer.register_listener(listener)
        async with consumer, Producer("aio-listen-pg", cluster.namesrv) as producer:
            await producer.send(Message("AioListen", b"steady"))
            await producer.send(Message("AioListen", b"flaky"))
            async with asyncio.timeout(30):
                await done.wait()
        assert (b"steady", 0) in seen
        assert (b"flaky", 0) in seen and (b"flaky", 1) in seen

    run(scenario())


def test_admin_calls_answer_from_the_cluster(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with Admin(cluster.namesrv) as admin:
            info = await admin.cluster_info()
            assert "DefaultCluster" in info.clusters
            route = await admin.topic_route("AioOrders")
            assert route.queue_datas[0].write_queue_nums == 4
            assert "AioOrders" in await admin.topic_list()
            queue = (await admin.queues("AioOrders"))[0]
            await admin.update_consumer_offset("aio-admin-cg", queue, 0)
            assert await admin.consumer_offset("aio-admin-cg", queue) == 0
            assert await admin.min_offset(queue) == 0
            with pytest.raises(TopicNotExistError):
                await admin.topic_route("AioNoSuchTopic")

    run(scenario())


def test_errors_are_the_sync_sdks(cluster: Cluster) -> None:
    def sync_error() -> FerryError:
        with (
            SyncProducer("aio-pg-sync", cluster.namesrv) as producer,
            pytest.raises(FerryError) as caught,
        ):
            producer.send(Message("AioNoSuchTopic", b"x"))
        return caught.value

    async def scenario() -> None:
        async with Producer("aio-pg-err", cluster.namesrv) as producer:
            with pytest.raises(TopicNotExistError) as missing:
                await producer.send(Message("AioNoSuchTopic", b"x"), timeout_ms=1500)
        expected = sync_error()
        assert type(missing.value) is type(expected)
        assert str(missing.value) == str(expected)
        assert missing.value.retriable is expected.retriable
        async with Producer("aio-pg-down", "127.0.0.1:1", send_timeout_ms=500) as nowhere:
            with pytest.raises(ConnectionFailedError, match="connection refused"):
                await nowhere.send(Message("AioOrders", b"x"))

    run(scenario())


def test_cancelled_sends_and_receives_leave_the_clients_usable(cluster: Cluster) -> None:
    async def scenario() -> None:
        consumer = PushConsumer(
            "aio-cancel-cg", cluster.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
        )
        consumer.subscribe("AioCancel")
        async with Producer("aio-pg-cancel", cluster.namesrv) as producer, consumer:
            # a receive cancelled while it waits for a message that is not there yet
            waiting = asyncio.create_task(anext(consumer))
            await asyncio.sleep(0.2)  # wait-ok: cancelled while it waits, whenever that is
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            # sends cancelled mid-flight, direct and batched
            direct = asyncio.create_task(producer.send(Message("AioCancel", b"gone?"), 2000))
            batched = [
                asyncio.create_task(producer.send(Message("AioCancel", b"c%d" % i)))
                for i in range(50)
            ]
            await asyncio.sleep(0)  # wait-ok: the tasks start sending first
            direct.cancel()
            for task in batched[::2]:
                task.cancel()
            await asyncio.gather(direct, *batched, return_exceptions=True)
            inst = producer._instance
            assert inst is not None
            # nothing is left waiting for a reply on any connection
            assert all(not conn._pending for conn in inst.pool._conns.values())
            after = await producer.send(Message("AioCancel", b"after"))
            assert after.status is SendStatus.SEND_OK
            got: list[bytes] = []
            async with asyncio.timeout(20):
                async for msg in consumer:
                    got.append(msg.body)
                    if msg.body == b"after":
                        break
            assert b"after" in got

    run(scenario())


def test_async_for_ends_when_the_consumer_shuts_down(cluster: Cluster) -> None:
    """A loop waiting in `async for` ends at shutdown, and one started after it ends at
    once, rather than waiting forever for messages that will not come."""

    async def scenario() -> None:
        consumer = PushConsumer(
            "aio-stop-cg", cluster.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
        )
        consumer.subscribe("AioStop")
        await consumer.start()
        got: list[bytes] = []
        first = asyncio.Event()

        async def iterate() -> None:
            async for msg in consumer:
                got.append(msg.body)
                first.set()

        loop_task = asyncio.create_task(iterate())
        async with Producer("aio-pg-stop", cluster.namesrv) as producer:
            await producer.send(Message("AioStop", b"one"))
        async with asyncio.timeout(20):
            await first.wait()
        await consumer.shutdown()
        async with asyncio.timeout(10):
            await loop_task  # it was waiting for the next message
        assert got == [b"one"]
        async with asyncio.timeout(5):
            assert [m async for m in consumer] == []

    run(scenario())


def test_a_simple_consumer_receives_acks_and_survives_a_cancelled_long_poll(
    cluster: Cluster,
) -> None:
    async def scenario() -> None:
        consumer = SimpleConsumer(
            "aio-pop-cg",
            cluster.namesrv,
            {"AioPop": "*"},
            await_duration=5,
            invisible_duration=2,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
        )
        async with consumer, Producer("aio-pop-pg", cluster.namesrv) as producer:
            polling = asyncio.create_task(consumer.receive(4))  # long-polls an empty topic
            await asyncio.sleep(0.3)  # wait-ok: cancelled mid long poll, whenever that is
            polling.cancel()
            with pytest.raises(asyncio.CancelledError):
                await polling
            assert consumer._started().pool._conns  # it had a request out...
            assert all(not c._pending for c in consumer._started().pool._conns.values())
            await producer.send(Message("AioPop", b"popped"))
            got: list[MessageExt] = []
            async with asyncio.timeout(20):
                while not got:
                    got = await consumer.receive(4)
            assert [m.body for m in got] == [b"popped"]
            await consumer.change_invisible_duration(got[0], 5)
            await consumer.ack(got[0])
            with pytest.raises(InvalidReceiptHandleError):
                await consumer.ack(got[0])  # acked already

    run(scenario())


def test_request_gets_its_reply_and_times_out_without_one(cluster: Cluster) -> None:
    async def scenario() -> None:
        replier = PushConsumer("aio-ask-cg", cluster.namesrv)
        replier.subscribe("AioAsk")

        async def answer(msgs: list[MessageExt]) -> ConsumeResult:
            for msg in msgs:
                if msg.body != b"ignore me":
                    await replier.reply(msg, b"re:" + msg.body)
            return ConsumeResult.SUCCESS

        replier.register_listener(answer)
        async with replier, Producer("aio-ask-pg", cluster.namesrv) as producer:
            reply = await producer.request(Message("AioAsk", b"ping"), timeout_ms=15_000)
            assert reply.body == b"re:ping"
            with pytest.raises(ReplyTimeoutError):
                await producer.request(Message("AioAsk", b"ignore me"), timeout_ms=1000)
            assert len(producer._requester.matcher) == 0

    run(scenario())


def test_a_simple_consumer_replies_to_a_request(cluster: Cluster) -> None:
    async def scenario() -> None:
        replier = SimpleConsumer(
            "aio-ask-pop-cg",
            cluster.namesrv,
            {"AioAskPop": "*"},
            await_duration=2,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
        )

        async def answer() -> None:
            while True:
                for msg in await replier.receive(4):
                    await replier.reply(msg, b"re:" + msg.body, {"who": "pop"})
                    await replier.ack(msg)

        async with replier, Producer("aio-ask-pop-pg", cluster.namesrv) as producer:
            answering = asyncio.create_task(answer())
            try:
                reply = await producer.request(Message("AioAskPop", b"ping"), timeout_ms=15_000)
            finally:
                answering.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await answering
        assert (reply.body, reply.properties["who"]) == (b"re:ping", "pop")

    run(scenario())


def test_sends_are_traced_as_the_sync_sdks(cluster: Cluster) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def scenario() -> tuple[str, list[str]]:
        async with Producer("aio-pg-traced", cluster.namesrv, tracer_provider=provider) as p:
            alone = await p.send(Message("AioTraced", b"alone"), timeout_ms=3000)
            batched = await asyncio.gather(*(p.send(Message("AioTraced", b"b")) for _ in range(5)))
        return alone.msg_id, [r.msg_id for r in batched]

    alone, batched = run(scenario())
    sends = [s for s in exporter.get_finished_spans() if s.name == "send AioTraced"]
    ids = {str((s.attributes or {}).get("messaging.message.id")) for s in sends}
    assert {alone, *batched} <= ids  # one span per message, batched or not
    assert all(s.status.is_ok for s in sends)
