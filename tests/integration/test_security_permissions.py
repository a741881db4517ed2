"""ACL 2.0 permissions through the SDK against a secure cluster (issue 27): a user allowed Pub
on Topic:orders sends there and nowhere else; one allowed Sub on Group:g and Topic:orders
consumes; Deny wins over Allow; a refusal changes nothing and is typed."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from itest_support import OtlpSink, wait_for
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from security_support import INNER, ROOT, SecureCluster, start_secure

from ferry.admin import Admin
from ferry.client import (
    BadSignatureError,
    ConsumeFromWhere,
    Credentials,
    LocalTransactionState,
    Message,
    MessageQueue,
    NoCredentialsError,
    NoPermissionError,
    Producer,
    PullConsumer,
    TransactionProducer,
)

ALICE = Credentials("alice", "alice-secret-0123")  # Pub on orders
BOB = Credentials("bob", "bob-secret-0123")  # Sub on orders as group g
CAROL = Credentials("carol", "carol-secret-0123")  # Pub on ord*, but Deny on orders
DAVE = Credentials("dave", "dave-secret-0123")  # Get on payments: routes, but no Pub


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, sink: OtlpSink) -> Iterator[SecureCluster]:
    c = start_secure(Path(tmp_path_factory.mktemp("perms")), sink.env(), metricsExporterType="PROM")
    try:
        with Admin(c.namesrv, credentials=ROOT) as admin:
            for topic in ("orders", "payments", "ordinals"):
                admin.create_topic(topic, 2, 2, broker_addr=c.cluster.broker_addr)
            for user in (ALICE, BOB, CAROL, DAVE):
                admin.create_user(user.access_key, user.secret_key, "Normal")
            admin.create_acl("User:alice", ["Topic:orders"], ["Pub"], "Allow")
            admin.create_acl("User:bob", ["Topic:orders", "Group:g"], ["Sub"], "Allow")
            admin.create_acl("User:carol", ["Topic:ord*"], ["Pub"], "Allow")
            admin.create_acl("User:carol", ["Topic:orders"], ["Pub"], "Deny")
            admin.create_acl("User:dave", ["Topic:payments"], ["Get"], "Allow")
        # the name server checks route lookups with the users the broker pushed to it
        wait_for(lambda: _can_route(c, ALICE, "orders"), timeout=20, what="users pushed")
        yield c
    finally:
        c.stop()


def _can_route(c: SecureCluster, creds: Credentials, topic: str) -> bool:
    from ferry.protocol.messages import GetRouteInfoRequest
    from ferry.protocol.rpc import BlockingClient

    with BlockingClient(f"tcp://{c.namesrv}", credentials=creds) as client:
        answer = client.call(GetRouteInfoRequest(topic), 3000)
    return answer is not None and type(answer[0]).__name__ == "RouteInfoReply"


def _max_offset(c: SecureCluster, topic: str) -> int:
    with Admin(c.namesrv, credentials=ROOT) as admin:
        stats = admin.topic_stats(topic)
    return sum(q.max_offset for queues in stats.values() for q in queues)


def test_pub_on_one_topic_sends_there_and_nowhere_else(secure: SecureCluster) -> None:
    with Producer("pg-alice", secure.namesrv, credentials=ALICE, retry_times=0) as producer:
        before = _max_offset(secure, "payments")
        assert producer.send(Message("orders", b"from alice")).msg_id
        with pytest.raises(NoPermissionError) as refused:
            producer.send(Message("payments", b"not allowed"))
    assert "Topic:payments" in str(refused.value)
    assert _max_offset(secure, "payments") == before


def test_sub_on_group_and_topic_consumes(secure: SecureCluster) -> None:
    with Producer("pg-alice", secure.namesrv, credentials=ALICE) as producer:
        sent = {producer.send(Message("orders", f"b{i}".encode())).msg_id for i in range(5)}
    got: set[str] = set()
    with PullConsumer(
        "g", secure.namesrv, ConsumeFromWhere.FIRST_OFFSET, credentials=BOB
    ) as consumer:
        consumer.subscribe("orders")

        def poll() -> bool:
            got.update(m.msg_id for m in consumer.poll(0.5))
            return sent <= got

        wait_for(poll, timeout=20, what="bob to consume alice's messages")
    # the same user under another group, or alice who may only publish, is refused
    queue = MessageQueue("orders", "broker-a", 0)
    for group, creds in (("other", BOB), ("g", ALICE)):
        with (
            Admin(secure.namesrv, credentials=creds) as admin,
            pytest.raises(NoPermissionError) as refused,
        ):
            admin.pull(queue, 0, 10, group=group)
        assert "Sub" in str(refused.value)


def test_deny_wins_over_allow(secure: SecureCluster) -> None:
    with Producer("pg-carol", secure.namesrv, credentials=CAROL, retry_times=0) as producer:
        assert producer.send(Message("ordinals", b"prefix allows")).msg_id
        with pytest.raises(NoPermissionError) as refused:
            producer.send(Message("orders", b"denied"))
    assert "Topic:orders" in str(refused.value)


def test_without_or_with_wrong_credentials_nothing_is_sent(secure: SecureCluster) -> None:
    before = _max_offset(secure, "orders")
    with pytest.raises(NoCredentialsError), Producer("pg", secure.namesrv) as producer:
        producer.send(Message("orders", b"anonymous"))
    wrong = Credentials("alice", "guess")
    with (
        pytest.raises(BadSignatureError),
        Producer("pg", secure.namesrv, credentials=wrong) as producer,
    ):
        producer.send(Message("orders", b"forged"))
    assert _max_offset(secure, "orders") == before


def test_cli_takes_credentials_from_flags_and_environment(secure: SecureCluster) -> None:
    base = [sys.executable, "-m", "ferry.cli", "admin"]
    no_creds = subprocess.run(
        [*base, "topicList", "-n", secure.namesrv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_creds.returncode != 0 and "credentials" in no_creds.stderr
    creds = ["--access-key", "root", "--secret-key", ROOT.secret_key]
    flags = subprocess.run(
        [*base, "topicList", "-n", secure.namesrv, *creds],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert flags.returncode == 0, flags.stderr
    assert "orders" in flags.stdout.split()
    env_run = subprocess.run(
        [*base, "topicList", "-n", secure.namesrv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**_env(), "FERRY_ACCESS_KEY": "root", "FERRY_SECRET_KEY": ROOT.secret_key},
    )
    assert env_run.returncode == 0, env_run.stderr
    assert "orders" in env_run.stdout.split()
    assert ROOT.secret_key not in flags.stdout + flags.stderr + env_run.stdout + env_run.stderr


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def test_refusals_are_counted_and_traced(
    secure: SecureCluster, sink: OtlpSink, spans: InMemorySpanExporter
) -> None:
    from ferry.protocol.messages import MetricsReply, MetricsRequest
    from ferry.protocol.rpc import BlockingClient

    with (
        Producer("pg-dave", secure.namesrv, credentials=DAVE, retry_times=0) as producer,
        pytest.raises(NoPermissionError),
    ):
        # dave may look the route up (Get) but not send: the broker refuses
        producer.send(Message("payments", b"refused and traced"))
    sent = [s for s in spans.get_finished_spans() if s.name.startswith("send payments")]
    assert sent, [s.name for s in spans.get_finished_spans()]
    trace_id = f"{sent[-1].context.trace_id:032x}"
    refused = wait_for(
        lambda: [
            s
            for s in sink.snapshot()
            if s.trace_id == trace_id and s.name == "SendMessageRequest refused"
        ],
        timeout=20,
        what="the broker's span of the refusal",
    )
    assert refused[0].service == "ferry-broker-remoting"
    assert refused[0].attributes.get("error.type") == "NO_PERMISSION"
    with BlockingClient(f"tcp://{secure.cluster.broker_addr}", credentials=INNER) as client:
        answer = client.call(MetricsRequest(), 5000)
    assert answer is not None and isinstance(answer[0], MetricsReply)
    counted = [
        sample
        for family in answer[0].families
        for sample in family.samples
        if sample.name == "rocketmq_auth_refusals_total"
        and sample.labels == {"reason": "NO_PERMISSION", "request": "SendMessageRequest"}
    ]
    assert counted and counted[0].value >= 1


def test_a_refused_consumer_says_so_once_per_queue(
    secure: SecureCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ferry.client")
    with PullConsumer(
        "other", secure.namesrv, credentials=BOB, rebalance_interval_ms=200
    ) as consumer:
        consumer.subscribe("orders")
        wait_for(
            lambda: consumer.poll(0.2) == [] and "may not Sub on Group:other" in caplog.text,
            timeout=20,
            what="the refusal to be logged",
        )
        for _ in range(10):  # about ten more rebalances, each refused again
            assert consumer.poll(0.2) == []
    refusals = [r for r in caplog.records if "may not Sub on Group:other" in r.getMessage()]
    assert len(refusals) == 1  # once, not at every rebalance


class _Commit:
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def test_a_transaction_needs_pub_on_its_topic_only(secure: SecureCluster) -> None:
    """The end of a transaction names its topic (checked against the half message), so alice,
    allowed Pub on orders and nothing on any group, commits one there."""
    before = _max_offset(secure, "orders")
    with TransactionProducer("tx-alice", secure.namesrv, _Commit(), credentials=ALICE) as tx:
        result = tx.send_in_transaction(Message("orders", b"in a transaction"))
    assert result.local_transaction_state is LocalTransactionState.COMMIT
    wait_for(lambda: _max_offset(secure, "orders") == before + 1, 20, "the commit to land")


def test_a_cluster_permission_holds_on_the_name_server_too(secure: SecureCluster) -> None:
    """A name server belongs to no one cluster: a user allowed Get on Cluster:DefaultCluster
    reads its cluster info there (the broker that pushed the user names its cluster), and a
    user with no Cluster permission is refused."""
    from ferry.protocol.messages import ClusterInfoReply, ErrorReply, GetClusterInfoRequest
    from ferry.protocol.rpc import BlockingClient

    erin = Credentials("erin", "erin-secret-0123")
    with Admin(secure.namesrv, credentials=ROOT) as admin:
        admin.create_user(erin.access_key, erin.secret_key, "Normal")
        admin.create_acl("User:erin", ["Cluster:DefaultCluster"], ["Get"], "Allow")

    def ask(creds: Credentials) -> object:
        with BlockingClient(f"tcp://{secure.namesrv}", credentials=creds) as client:
            answer = client.call(GetClusterInfoRequest(), 3000)
        return None if answer is None else answer[0]

    wait_for(lambda: isinstance(ask(erin), ClusterInfoReply), 20, "erin to read the cluster")
    refused = ask(ALICE)
    assert isinstance(refused, ErrorReply) and "Cluster:DefaultCluster" in refused.message
