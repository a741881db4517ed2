"""The broker group's Prometheus endpoint (metricsExporterType=PROM): one scrape target whose
counters and lag gauges follow the messages."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable

import pytest
from itest_support import Cluster, RawClient, wait_for

from ferry.client import (
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    TransactionProducer,
)
from ferry.protocol.messages import ConsumerSendMsgBackRequest, OkReply

pytestmark = pytest.mark.integration

PROM = {
    "metricsExporterType": "PROM",
    "metricsPromExporterPort": "0",
    # async flushes of whatever is dirty, every 100 ms: the flush histogram fills
    "flushCommitLogLeastPages": "0",
    "flushIntervalCommitLog": "100",
}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


Sample = tuple[str, dict[str, str], float]


def scrape(addr: str, query: str = "") -> tuple[str, list[Sample]]:
    with urllib.request.urlopen(f"http://{addr}/metrics{query}", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    samples: list[Sample] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        labels = dict(_LABEL.findall(match.group(3) or ""))
        samples.append((match.group(1), labels, float(match.group(4))))
    return text, samples


def total(samples: list[Sample], name: str, **labels: str) -> float:
    return sum(
        v
        for n, got, v in samples
        if n == name and all(got.get(k) == want for k, want in labels.items())
    )


def test_scrape_shows_in_out_counters_and_lag_moving_with_the_messages(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(**PROM)
    addr = cluster.local.get("broker-remoting").endpoints["metrics"]
    text, samples = scrape(addr)
    # one target for the group: every process answers, none is missing
    assert "broker-store" in {labels.get("process") for _, labels, _ in samples}
    assert not [s for s in samples if s[0] == "ferry_scrape_errors"]
    assert "# TYPE rocketmq_rpc_latency histogram" not in text  # nothing sent yet

    with Producer("pg-metered", cluster.namesrv) as producer:
        for i in range(10):
            producer.send(Message("Metered", f"m{i}".encode() * 10, tags="T"))
        _, samples = scrape(addr)
        assert total(samples, "rocketmq_messages_in_total", topic="Metered") == 10
        remoting = {"process": "broker-remoting", "cluster": "DefaultCluster"}
        assert total(samples, "rocketmq_messages_in_total", **remoting) == 10
        assert total(samples, "rocketmq_throughput_in_total", topic="Metered") > 200
        # prometheus_client's name filter works on the group's families
        _, only = scrape(addr, "?name[]=rocketmq_messages_in_total")
        assert {name for name, _, _ in only} == {"rocketmq_messages_in_total"}
        sends = total(samples, "rocketmq_rpc_latency_count", request_code="send_message")
        assert sends == 10
        # the store's own series come through the same target
        assert total(samples, "rocketmq_storage_commitlog_max_offset", process="broker-store") > 0
        flushes = wait_for(
            lambda: total(scrape(addr)[1], "rocketmq_storage_flush_latency_count"),
            what="a flush in the store's flush latency histogram",
        )
        assert flushes >= 1

        with PullConsumer(
            "cg-metered",
            cluster.namesrv,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
            auto_commit=False,
        ) as consumer:
            consumer.subscribe("Metered")
            got: list[MessageExt] = []
            wait_for(
                lambda: got.extend(consumer.poll(timeout=1.0)) or len(got) >= 10,
                timeout=30,
                what="the first ten messages",
            )
            consumer.commit()

            def caught_up() -> list[Sample] | None:
                _, s = scrape(addr)
                lag = [x for x in s if x[0] == "rocketmq_consumer_lag_messages"]
                mine = [x for x in lag if x[1].get("consumer_group") == "cg-metered"]
                return s if mine and all(v == 0 for _, _, v in mine) else None

            samples = wait_for(caught_up, timeout=20, what="lag 0 after the commit")
            out = total(samples, "rocketmq_messages_out_total", topic="Metered")
            assert out == 10
            assert total(samples, "rocketmq_throughput_out_total", topic="Metered") > 200

            for i in range(5):
                producer.send(Message("Metered", f"late{i}".encode()))

            def lagging() -> list[Sample] | None:
                _, s = scrape(addr)
                lag = total(s, "rocketmq_consumer_lag_messages", consumer_group="cg-metered")
                return s if lag == 5 else None

            samples = wait_for(lagging, timeout=20, what="a lag of five messages")
            ages = [
                v
                for n, labels, v in samples
                if n == "rocketmq_consumer_lag_latency"
                and labels.get("consumer_group") == "cg-metered"
            ]
            assert max(ages) > 0  # the oldest unconsumed message has an age
            assert total(samples, "rocketmq_messages_in_total", topic="Metered") == 15

            got.clear()
            wait_for(
                lambda: got.extend(consumer.poll(timeout=1.0)) or len(got) >= 5,
                timeout=30,
                what="the five late messages",
            )
            consumer.commit()
            samples = wait_for(caught_up, timeout=20, what="lag 0 again")
            assert total(samples, "rocketmq_messages_out_total", topic="Metered") == 15
            pulls = total(samples, "rocketmq_rpc_latency_count", request_code="pull_message")
            assert pulls > 0

    # a message given up on goes to the DLQ (delay level < 0: at once), and is counted
    dead = got[0]
    assert isinstance(dead, MessageExt)
    client = RawClient(cluster.broker_addr)
    try:
        reply, _ = client.call(
            ConsumerSendMsgBackRequest("cg-metered", dead.commitlog_offset, delay_level=-1)
        )
    finally:
        client.close()
    assert isinstance(reply, OkReply), reply
    _, samples = scrape(addr)
    dlq = total(samples, "rocketmq_send_to_dlq_messages_total", consumer_group="cg-metered")
    assert dlq == 1

    # transactions: a commit is counted; the check-back's half-message backlog is in the scrape
    class Commits:
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

    with TransactionProducer("pg-metered-tx", cluster.namesrv, Commits()) as tx:
        tx.send_in_transaction(Message("MeteredTx", b"tx"))
    _, samples = scrape(addr)
    assert total(samples, "rocketmq_commit_messages_total") == 1
    assert total(samples, "rocketmq_rollback_messages_total") == 0
    half = [x for x in samples if x[0] == "rocketmq_half_messages"]
    assert [x[1]["process"] for x in half] == ["checkback"]
    checks = [x for x in samples if x[0] == "rocketmq_transaction_checks_total"]
    assert [x[1]["process"] for x in checks] == ["checkback"]
