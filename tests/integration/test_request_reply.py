"""Request/reply through real brokers (issue 29): Producer.request / request_async and a
consumer's reply(), the cluster's reply topic, correlation of concurrent requests, timeouts."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from itest_support import (
    Cluster,
    module_cluster,  # noqa: F401 - the cluster fixture
    start_cluster,
    wait_for,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from security_support import ROOT, SECURITY

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Credentials,
    Message,
    MessageExt,
    NoPermissionError,
    Producer,
    PullConsumer,
    PushConsumer,
    QueryNotFoundError,
    ReplyTimeoutError,
    SimpleConsumer,
)
from ferry.protocol.messages import GetRouteInfoRequest, RouteInfoReply
from ferry.protocol.rpc import BlockingClient

FIRST = ConsumeFromWhere.FIRST_OFFSET
REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


def echo_replier(cluster: Cluster, group: str, topic: str) -> PushConsumer:
    """A push consumer that answers every request with "re:" + its body."""
    consumer = PushConsumer(group, cluster.namesrv, consume_from=FIRST, consume_thread_nums=8)
    consumer.subscribe(topic)

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        for msg in msgs:
            if "CORRELATION_ID" in msg.properties:  # not the message that made the topic
                consumer.reply(msg, b"re:" + msg.body, properties={"served-by": group})
        return ConsumeResult.SUCCESS

    consumer.register_listener(listener)
    consumer.start()
    return consumer


def test_reply_topic_exists_per_cluster(cluster: Cluster) -> None:
    with Admin(cluster.namesrv) as admin:
        route = wait_for(lambda: admin.topic_route(REPLY_TOPIC), what="reply topic route")
        assert [q.read_queue_nums for q in route.queue_datas] == [1]
        assert REPLY_TOPIC in admin.topic_list()


def test_request_gets_the_reply_of_a_push_consumer(cluster: Cluster) -> None:
    with Producer("rr-req", cluster.namesrv) as producer:
        producer.send(Message("rr-echo", b"create the topic"))
        replier = echo_replier(cluster, "rr-echo-replier", "rr-echo")
        try:
            reply = producer.request(Message("rr-echo", b"ping", tags="q"), 10_000)
        finally:
            replier.shutdown()
    assert reply.body == b"re:ping"
    assert reply.topic == REPLY_TOPIC
    assert reply.properties["served-by"] == "rr-echo-replier"
    assert reply.properties["MSG_TYPE"] == "reply"
    assert reply.properties["CORRELATION_ID"]
    assert reply.store_timestamp > 0 and reply.broker_name
    # a copy is stored in the reply topic, found by its id like any message
    with Admin(cluster.namesrv) as admin:

        def stored() -> list[MessageExt]:
            try:
                return admin.query_msg_by_unique_key(REPLY_TOPIC, reply.msg_id)
            except QueryNotFoundError:
                return []

        copies = wait_for(stored, what="the stored reply")
    assert [m.body for m in copies] == [b"re:ping"]


def test_concurrent_requests_each_get_their_own_reply(cluster: Cluster) -> None:
    with Producer("rr-many", cluster.namesrv) as producer:
        producer.send(Message("rr-many", b"create the topic"))
        replier = echo_replier(cluster, "rr-many-replier", "rr-many")
        try:
            producer.request(Message("rr-many", b"warm-up"), 10_000)
            bodies = [f"n-{i}".encode() for i in range(200)]
            with ThreadPoolExecutor(16) as pool:
                replies = list(
                    pool.map(lambda b: producer.request(Message("rr-many", b), 10_000), bodies)
                )
            futures = [producer.request_async(Message("rr-many", b)) for b in bodies]
            async_replies = [f.result(10) for f in futures]
        finally:
            replier.shutdown()
    assert [r.body for r in replies] == [b"re:" + b for b in bodies]
    assert [r.body for r in async_replies] == [b"re:" + b for b in bodies]


def test_a_simple_consumer_replies_to_what_it_receives(cluster: Cluster) -> None:
    with (
        Producer("rr-pop-req", cluster.namesrv) as producer,
        SimpleConsumer(
            "rr-pop-replier",
            cluster.namesrv,
            {"rr-pop": "*"},
            await_duration=2.0,
            consume_from=FIRST,
        ) as replier,
    ):
        producer.send(Message("rr-pop", b"create the topic"))
        pending = producer.request_async(Message("rr-pop", b"pop-ping"), timeout_ms=20_000)
        served = 0
        while not pending.done() and served < 50:
            for msg in replier.receive(8):
                if "CORRELATION_ID" in msg.properties:
                    replier.reply(msg, b"re:" + msg.body)
                replier.ack(msg)
            served += 1
        assert pending.result(20).body == b"re:pop-ping"


def test_request_without_reply_fails_at_its_timeout_and_a_late_reply_is_dropped(
    cluster: Cluster,
) -> None:
    with Producer("rr-slow", cluster.namesrv) as producer:
        producer.send(Message("rr-slow", b"create the topic"))
        held: list[MessageExt] = []
        consumer = PullConsumer("rr-slow-replier", cluster.namesrv, consume_from=FIRST)
        consumer.subscribe("rr-slow")
        with consumer:
            with pytest.raises(ReplyTimeoutError, match="no reply in 700 ms"):
                producer.request(Message("rr-slow", b"nobody answers in time"), 700)

            def take() -> bool:
                held.extend(m for m in consumer.poll(0.5) if m.body.startswith(b"nobody"))
                return bool(held)

            wait_for(take, what="the timed-out request")
            late = consumer.reply(held[0], b"too late")  # the broker takes it...
            assert late.queue.topic == REPLY_TOPIC
            # ... and the requester drops it: the next request gets its own reply, not it
            answer: list[MessageExt] = []

            def answer_next() -> None:
                msgs: list[MessageExt] = []

                def take_next() -> bool:
                    msgs.extend(m for m in consumer.poll(0.5) if m.body == b"answer me")
                    return bool(msgs)

                wait_for(take_next, what="the second request")
                consumer.reply(msgs[0], b"answered")

            worker = threading.Thread(target=answer_next)
            worker.start()
            answer.append(producer.request(Message("rr-slow", b"answer me"), 10_000))
            worker.join()
    assert answer[0].body == b"answered"


def test_callback_form_calls_on_success_and_on_exception(cluster: Cluster) -> None:
    done = threading.Event()
    outcomes: dict[str, object] = {}

    class Callback:
        def __init__(self, name: str) -> None:
            self.name = name

        def on_success(self, reply: MessageExt) -> None:
            outcomes[self.name] = reply.body
            if len(outcomes) == 2:
                done.set()

        def on_exception(self, error: BaseException) -> None:
            outcomes[self.name] = error
            if len(outcomes) == 2:
                done.set()

    with Producer("rr-cb", cluster.namesrv) as producer:
        producer.send(Message("rr-cb", b"create the topic"))
        producer.send(Message("rr-cb-silent", b"create the topic"))
        replier = echo_replier(cluster, "rr-cb-replier", "rr-cb")
        try:
            producer.request(Message("rr-cb", b"warm-up"), 10_000)
            producer.request_async(Message("rr-cb", b"hello"), Callback("ok"), 10_000)
            # nobody consumes rr-cb-silent: this one times out
            producer.request_async(Message("rr-cb-silent", b"hello"), Callback("timeout"), 500)
            assert done.wait(15)
        finally:
            replier.shutdown()
    assert outcomes["ok"] == b"re:hello"
    assert isinstance(outcomes["timeout"], ReplyTimeoutError)


def test_reply_to_a_plain_message_is_refused(cluster: Cluster) -> None:
    with Producer("rr-plain", cluster.namesrv) as producer:
        producer.send(Message("rr-plain", b"not a request"))
    consumer = PullConsumer("rr-plain-reader", cluster.namesrv, consume_from=FIRST)
    consumer.subscribe("rr-plain")
    with consumer:
        got: list[MessageExt] = []
        wait_for(lambda: got.extend(consumer.poll(0.5)) or got, what="the plain message")
        with pytest.raises(Exception, match="is not a request"):
            consumer.reply(got[0], b"hm")


def test_the_reply_continues_the_request_trace(
    cluster: Cluster, spans: InMemorySpanExporter
) -> None:
    with Producer("rr-traced", cluster.namesrv) as producer:
        producer.send(Message("rr-traced", b"create the topic"))
        replier = echo_replier(cluster, "rr-traced-replier", "rr-traced")
        try:
            reply = producer.request(Message("rr-traced", b"follow me"), 10_000)
        finally:
            replier.shutdown()
    assert reply.body == b"re:follow me"
    finished = spans.get_finished_spans()
    reply_send = next(s for s in finished if s.name == f"send {REPLY_TOPIC}")
    assert reply_send.kind is SpanKind.PRODUCER
    parent, context = reply_send.parent, reply_send.context
    assert parent is not None and context is not None
    # its parent is the request's own send span, in the same trace
    request_send = next(
        s for s in finished if s.context is not None and s.context.span_id == parent.span_id
    )
    assert request_send.name == "send rr-traced"
    assert context.trace_id == parent.trace_id
    attributes = dict(reply_send.attributes or {})
    assert attributes["messaging.message.conversation_id"] == reply.properties["CORRELATION_ID"]
    assert reply.properties["traceparent"].split("-")[1] == format(context.trace_id, "032x")


def can_route(c: Cluster, creds: Credentials, topic: str) -> bool:
    with BlockingClient(f"tcp://{c.namesrv}", credentials=creds) as client:
        answer = client.call(GetRouteInfoRequest(topic), 3000)
    return answer is not None and isinstance(answer[0], RouteInfoReply)


def test_with_authorization_requesters_need_sub_and_repliers_pub_on_the_reply_topic(
    tmp_path: Path,
) -> None:
    secure = start_cluster(tmp_path, overrides=SECURITY)
    asker, answerer = Credentials("asker", "asker-pw"), Credentials("answerer", "answerer-pw")
    try:
        with Admin(secure.namesrv, credentials=ROOT) as admin:
            for user in (asker, answerer):
                admin.create_user(user.access_key, user.secret_key, cluster="DefaultCluster")
            admin.create_acl("User:asker", ["Topic:rr-secure"], ["Pub"], "Allow")
            admin.create_acl(
                "User:answerer", ["Topic:rr-secure", "Group:rr-secure-g"], ["Sub"], "Allow"
            )
            admin.create_acl("User:answerer", [f"Topic:{REPLY_TOPIC}"], ["Pub"], "Allow")
        with Producer("rr-root", secure.namesrv, credentials=ROOT) as root:
            root.send(Message("rr-secure", b"create the topic"))
        for user in (asker, answerer):  # the name server knows the users the broker pushed
            wait_for(lambda u=user: can_route(secure, u, "rr-secure"), 20, "users pushed")
        consumer = PullConsumer(
            "rr-secure-g", secure.namesrv, consume_from=FIRST, credentials=answerer
        )
        consumer.subscribe("rr-secure")
        with consumer, Producer("rr-asker", secure.namesrv, credentials=asker) as producer:
            # without Sub on the reply topic its polls are refused: the request fails now,
            # saying why, rather than at its timeout
            with pytest.raises(NoPermissionError, match=REPLY_TOPIC):
                producer.request(Message("rr-secure", b"first"), 30_000)
            with Admin(secure.namesrv, credentials=ROOT) as admin:
                admin.create_acl("User:asker", [f"Topic:{REPLY_TOPIC}"], ["Sub"], "Allow")

            def answer() -> None:
                # the refused first request is there too: every request gets its reply
                answered: list[bytes] = []

                def take() -> bool:
                    for msg in consumer.poll(0.5):
                        if "CORRELATION_ID" in msg.properties:
                            consumer.reply(msg, b"re:" + msg.body)
                            answered.append(msg.body)
                    return b"second" in answered

                wait_for(take, what="the second request")

            worker = threading.Thread(target=answer)
            worker.start()
            reply = producer.request(Message("rr-secure", b"second"), 10_000)
            worker.join()
        assert reply.body == b"re:second"
    finally:
        secure.local.stop()


def test_replies_are_not_stored_with_store_reply_message_enable_false(tmp_path: Path) -> None:
    c = start_cluster(tmp_path, overrides={"storeReplyMessageEnable": "false"})
    try:
        with Producer("rr-nostore", c.namesrv) as producer:
            producer.send(Message("rr-nostore", b"create the topic"))
            replier = echo_replier(c, "rr-nostore-replier", "rr-nostore")
            try:
                for i in range(3):
                    reply = producer.request(Message("rr-nostore", f"q{i}".encode()), 10_000)
                    assert reply.body == f"re:q{i}".encode()
            finally:
                replier.shutdown()
        with Admin(c.namesrv) as admin:
            stats = admin.topic_stats(REPLY_TOPIC)
        assert [q.max_offset for queues in stats.values() for q in queues] == [0]
    finally:
        c.local.stop()
