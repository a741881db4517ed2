"""SDK behaviours against real services (name server, broker-store, broker-remoting) started
as processes by the launcher of `ferry dev up`."""

from __future__ import annotations

import gc
import socket
import threading
import time
import types
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ferry.admin import Admin
from ferry.client import (
    ConnectionFailedError,
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    RequestTimeoutError,
    SendStatus,
)
from ferry.protocol.record import decode_offset_msg_id
from ferry.runtime.testing.cluster import Cluster, running_cluster
from ferry.runtime.testing.pytest_support import module_cluster  # noqa: F401 - the cluster fixture

pytestmark = pytest.mark.integration

FIRST = ConsumeFromWhere.FIRST_OFFSET


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)  # wait-ok: polling interval of a deadline-bounded wait


def drain(consumer: PullConsumer, want: int, timeout: float = 30.0) -> list[MessageExt]:
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(timeout=0.5))
    return got


def create(cluster: Cluster, topic: str, queues: int) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic(topic, queues, queues)


def test_async_sends_are_batched_and_each_gets_its_own_result(cluster: Cluster) -> None:
    create(cluster, "AsyncBatched", 2)
    with Admin(cluster.namesrv) as admin:
        before = admin.broker_runtime_info(cluster.broker_addr)
    with Producer("pg-async", cluster.namesrv) as producer:
        futures = [
            producer.send_async(Message("AsyncBatched", f"m{i}".encode(), keys=f"k{i}"))
            for i in range(3000)
        ]
        results = [f.result(30) for f in futures]
    with Admin(cluster.namesrv) as admin:
        after = admin.broker_runtime_info(cluster.broker_addr)
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert len({r.msg_id for r in results}) == 3000
    assert len({r.offset_msg_id for r in results}) == 3000
    per_queue: dict[int, list[int]] = defaultdict(list)
    for r in results:
        per_queue[r.queue.queue_id].append(r.queue_offset)
    for offsets in per_queue.values():
        assert sorted(offsets) == list(range(len(offsets)))
    requests = int(after["putRequestTotal"]) - int(before["putRequestTotal"])
    stored = int(after["putMessageTotal"]) - int(before["putMessageTotal"])
    assert stored == 3000
    assert requests < 3000 / 4, f"{requests} requests for 3000 async sends: no batching"

    with PullConsumer("cg-async", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe("AsyncBatched")
        got = drain(consumer, 3000)
    by_id = {r.msg_id: r for r in results}
    assert len(got) == 3000
    for msg in got:
        sent = by_id[msg.msg_id]
        assert (msg.queue.queue_id, msg.queue_offset) == (sent.queue.queue_id, sent.queue_offset)
        assert msg.commitlog_offset == decode_offset_msg_id(sent.offset_msg_id)[1]
        assert msg.keys == [f"k{msg.body.decode()[1:]}"]


def reachable_bytes(root: object, limit: int = 20_000) -> int:
    """The size of the largest bytes object reachable from root (a bounded walk of
    gc.get_referents, modules and classes left out)."""
    seen: set[int] = set()
    todo = [root]
    largest = 0
    while todo and len(seen) < limit:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type | types.ModuleType):
            continue
        seen.add(id(obj))
        if isinstance(obj, bytes):
            largest = max(largest, len(obj))
        todo.extend(gc.get_referents(obj))
    return largest


def test_futures_held_after_their_results_keep_no_encoded_records(cluster: Cluster) -> None:
    create(cluster, "AsyncHeld", 1)
    with Producer("pg-held", cluster.namesrv) as producer:
        futures = [producer.send_async(Message("AsyncHeld", b"b" * 1000)) for _ in range(600)]
        results = [f.result(30) for f in futures]
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    # a batch's encoded records (~1 KB a message) once stayed alive as long as its futures;
    # neither they nor the 1,000-byte bodies may be reachable from a settled future
    assert max(reachable_bytes(f) for f in futures[::50]) < 1000


def test_offset_msg_id_of_a_send_names_the_stored_record(cluster: Cluster) -> None:
    with Producer("pg-offset-id", cluster.namesrv) as producer:
        sent = producer.send(Message("OffsetIds", b"x"))
    with PullConsumer("cg-offset-id", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as c:
        c.subscribe("OffsetIds")
        (got,) = drain(c, 1)
    assert got.offset_msg_id == sent.offset_msg_id


def test_shutdown_sends_what_async_left_waiting(cluster: Cluster) -> None:
    create(cluster, "AsyncShutdown", 1)
    producer = Producer("pg-shutdown", cluster.namesrv, max_batches_in_flight=1)
    producer.start()
    futures = [producer.send_async(Message("AsyncShutdown", b"x")) for _ in range(500)]
    producer.shutdown()
    assert all(f.done() for f in futures)
    assert {f.result().status for f in futures} == {SendStatus.SEND_OK}


def test_unknown_topic_is_created_through_tbw102(cluster: Cluster) -> None:
    with Producer("pg-auto", cluster.namesrv) as producer:
        first = producer.send(Message("AutoCreated", b"first"))
        assert first.status is SendStatus.SEND_OK
        assert first.queue.queue_id < 4
    with Admin(cluster.namesrv) as admin:

        def route() -> Any:
            try:
                return admin.topic_route("AutoCreated")
            except Exception:  # noqa: BLE001 - not registered yet
                return None

        data = wait_for(route)
    assert data is not None, "the auto-created topic never reached the name server"
    assert [q.write_queue_nums for q in data.queue_datas] == [4]


def test_orderly_sends_of_one_key_share_a_queue_and_keep_their_order(
    cluster: Cluster,
) -> None:
    create(cluster, "Orderly", 4)
    with Producer("pg-orderly", cluster.namesrv) as producer:
        queues: dict[str, set[int]] = defaultdict(set)
        for i in range(40):
            key = f"order-{i % 4}"
            result = producer.send_orderly(Message("Orderly", f"{key}:{i}".encode()), key)
            queues[key].add(result.queue.queue_id)
    assert all(len(q) == 1 for q in queues.values())
    with PullConsumer("cg-orderly", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as c:
        c.subscribe("Orderly")
        got = drain(c, 40)
    seen: dict[str, list[int]] = defaultdict(list)
    for msg in got:
        key, seq = msg.body.decode().split(":")
        seen[key].append(int(seq))
    assert all(seqs == sorted(seqs) for seqs in seen.values())
    assert sum(len(s) for s in seen.values()) == 40


def test_tag_expression_filters_exactly(cluster: Cluster) -> None:
    create(cluster, "Tagged", 2)
    with Producer("pg-tags", cluster.namesrv) as producer:
        producer.send_batch(
            [Message("Tagged", f"{t}{i}".encode(), tags=t) for i in range(10) for t in "ABC"]
        )
    with PullConsumer("cg-tags", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as c:
        c.subscribe("Tagged", "A || C")
        got = drain(c, 20)
        extra = c.poll(timeout=0.5)
    assert {m.tags for m in got} == {"A", "C"}
    assert len(got) == 20 and extra == []


def test_send_batch_ids_keys_and_properties_arrive(cluster: Cluster) -> None:
    """A batch of plain messages (encoded in one pass) and one with properties of its own
    (the general path) store the same fields: ids in order, tags, keys, properties."""
    create(cluster, "BatchFields", 1)
    plain = [
        Message("BatchFields", f"p{i}".encode(), tags="T", keys=[f"k{i}", "x"]) for i in range(5)
    ]
    general = [Message("BatchFields", b"g", keys=["g"], properties={"color": "red"}), *plain[:1]]
    with Producer("pg-batch-fields", cluster.namesrv) as producer:
        ids = producer.send_batch(plain).msg_id.split(",") + producer.send_batch(
            general
        ).msg_id.split(",")
    with PullConsumer("cg-batch-fields", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as c:
        c.subscribe("BatchFields")
        got = sorted(drain(c, 7), key=lambda m: m.queue_offset)
    assert [m.msg_id for m in got] == ids and len(set(ids)) == 7
    assert [m.body for m in got] == [b"p0", b"p1", b"p2", b"p3", b"p4", b"g", b"p0"]
    assert [m.keys for m in got[:5]] == [[f"k{i}", "x"] for i in range(5)]
    assert {m.tags for m in got[:5]} == {"T"}
    assert got[5].properties["color"] == "red" and got[5].keys == ["g"]


def test_seek_redelivers_and_commit_remembers(cluster: Cluster) -> None:
    create(cluster, "Seek", 1)
    queue = MessageQueue("Seek", "broker-a", 0)
    with Producer("pg-seek", cluster.namesrv) as producer:
        producer.send_batch([Message("Seek", f"m{i}".encode()) for i in range(10)])
    with PullConsumer(
        "cg-seek", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET, auto_commit=False
    ) as c:
        c.assign([queue])
        assert [m.queue_offset for m in drain(c, 10)] == list(range(10))
        c.seek(queue, 7)
        assert [m.body for m in drain(c, 3)] == [b"m7", b"m8", b"m9"]
        c.commit()
        assert c.committed(queue) == 10
        c.seek_to_beginning(queue)
        assert len(drain(c, 10)) == 10


def test_sends_fail_within_the_timeout_when_the_broker_is_gone(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        local = cluster.local
        with Producer("pg-gone", local.namesrv_addr, send_timeout_ms=1500) as producer:
            assert producer.send(Message("Gone", b"ok")).status is SendStatus.SEND_OK
            local.get("broker-remoting").stop()
            started = time.monotonic()
            with pytest.raises((RequestTimeoutError, ConnectionFailedError)):
                producer.send(Message("Gone", b"lost"))
            assert time.monotonic() - started < 1.5 + 1.0
            future = producer.send_async(Message("Gone", b"lost too"))
            with pytest.raises((RequestTimeoutError, ConnectionFailedError)):
                future.result(5)


def test_clients_register_with_the_broker_and_leave_at_shutdown(cluster: Cluster) -> None:
    def clients() -> int:
        with Admin(cluster.namesrv) as admin:
            return int(admin.broker_runtime_info(cluster.broker_addr)["clientCount"])

    before = clients()
    with Producer("pg-heartbeat", cluster.namesrv) as producer:
        producer.send(Message("Heartbeat", b"x"))
        assert wait_for(lambda: clients() == before + 1), "no heartbeat after the first send"
        with PullConsumer("cg-heartbeat", cluster.namesrv) as consumer:
            consumer.subscribe("Heartbeat")
            assert wait_for(lambda: clients() == before + 2), "no consumer heartbeat at start"
        assert wait_for(lambda: clients() == before + 1), "consumer did not unregister"
    assert wait_for(lambda: clients() == before), "producer did not unregister"


def test_a_live_consumer_and_producer_carry_on_after_a_broker_restart(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        local = cluster.local
        with (
            Producer("pg-restart", local.namesrv_addr) as producer,
            PullConsumer("cg-restart", local.namesrv_addr, ConsumeFromWhere.FIRST_OFFSET) as c,
        ):
            c.subscribe("Restarted")
            producer.send(Message("Restarted", b"before"))
            assert [m.body for m in drain(c, 1)] == [b"before"]
            cluster.restart_broker()  # the broker group, on its port and dir
            sent = wait_for(lambda: _try_send(producer, Message("Restarted", b"after")))
            assert sent, "the producer could not send after the restart"
            started = time.monotonic()
            got = drain(c, 1, timeout=20)
            assert [m.body for m in got] == [b"after"]
            # held pulls failed when the broker went away instead of waiting out their hold
            assert time.monotonic() - started < 10


def _try_send(producer: Producer, msg: Message) -> bool:
    try:
        return producer.send(msg).status is SendStatus.SEND_OK
    except (RequestTimeoutError, ConnectionFailedError):
        return False


def test_a_dead_name_server_in_the_list_is_skipped_without_waiting_out_the_timeout(
    cluster: Cluster,
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    with Admin(f"{dead};{cluster.namesrv}", timeout_ms=3000) as admin:
        started = time.monotonic()
        assert "TBW102" in admin.topic_list()
        first = time.monotonic() - started
        assert admin.cluster_info().clusters == {"DefaultCluster": ["broker-a"]}
    # the refused connection failed the request at once: far less than its 3 s timeout
    assert first < 1.5


def test_clients_leave_no_thread_behind(cluster: Cluster) -> None:
    with (
        Producer("pg-threads", cluster.namesrv) as producer,
        PullConsumer("cg-threads", cluster.namesrv) as consumer,
        Admin(cluster.namesrv) as admin,
    ):
        consumer.subscribe("Threads")
        pushed: list[MessageExt] = []
        push = PushConsumer("cg-threads-push", cluster.namesrv, consume_from=FIRST)
        push.subscribe("Threads")

        def listen(msgs: list[MessageExt]) -> ConsumeResult:
            pushed.extend(msgs)
            return ConsumeResult.SUCCESS

        push.register_listener(listen)
        push.start()
        producer.send(Message("Threads", b"x"))
        assert wait_for(lambda: pushed, 15), "the push consumer got nothing"
        push.shutdown()
        producer.send_async(Message("Threads", b"y")).result(5)
        admin.topic_list()
        assert any(t.name.startswith("ferry-") for t in threading.enumerate())
    assert [t.name for t in threading.enumerate() if t.name.startswith("ferry-")] == []
