"""A message's trace across HA: the slave's replicator applies it in the producer's trace, and
a consumer reading from the slave (its master gone) links to the same creation context."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from consume_support import create_topic
from ha_support import HA_FAST, HaPair, broker_ids, status
from itest_support import OtlpSink, wait_for
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ferry.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer
from ferry.protocol.messages import GetAllTopicConfigRequest, TopicConfigListReply
from ferry.runtime.launcher import add_slave_group, start_local_cluster

pytestmark = pytest.mark.integration

TOPIC = "HaTraced"
WITH_METRICS = {**HA_FAST, "metricsExporterType": "PROM", "metricsPromExporterPort": "0"}
OTLP_CONSUMER = 5


@pytest.fixture
def pair(tmp_path: Path, sink: OtlpSink) -> Iterator[HaPair]:
    env = sink.env()
    master = start_local_cluster(str(tmp_path), overrides=WITH_METRICS, env=env)
    try:
        slave = add_slave_group(
            master, str(tmp_path / "broker-a-s"), overrides=WITH_METRICS, env=env
        )
    except BaseException:
        master.stop()
        raise
    p = HaPair(tmp_path, master, slave, dict(WITH_METRICS))
    try:
        wait_for(lambda: broker_ids(p.namesrv) == {0, 1}, 20, "master and slave routed")
        yield p
    finally:
        p.close()


def test_replication_and_a_slave_read_stay_in_the_message_trace(
    pair: HaPair, sink: OtlpSink, spans: InMemorySpanExporter
) -> None:
    create_topic(pair.namesrv, TOPIC, 1)

    def slave_has_topic() -> bool:
        reply = status(pair.slave.broker_addr, GetAllTopicConfigRequest())
        return isinstance(reply, TopicConfigListReply) and any(
            t.topic_name == TOPIC for t in reply.topics
        )

    wait_for(slave_has_topic, 10, "the topic synced to the slave")
    with Producer("pg-ha-traced", pair.namesrv) as producer:
        producer.send(Message(TOPIC, b"replicate me"))
    send = next(s for s in spans.get_finished_spans() if s.name == f"send {TOPIC}")
    assert send.context is not None
    trace_id = format(send.context.trace_id, "032x")
    send_id = format(send.context.span_id, "016x")
    pair.wait_in_sync()
    # replication lag, from the master's scrape target: the slave has it all
    addr = pair.master.get("broker-remoting").endpoints["metrics"]

    def lag_lines() -> list[str]:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        prefix = "rocketmq_ha_replication_lag_bytes{"
        return [ln for ln in text.splitlines() if ln.startswith(prefix)]

    (lag,) = wait_for(
        lambda: [ln for ln in lag_lines() if float(ln.rsplit(" ", 1)[1]) == 0], 15, "lag 0"
    )
    assert 'slave_id="1"' in lag and 'process="ha-replicator"' in lag

    def replicated() -> list[object] | None:
        found = [
            s
            for s in sink.snapshot()
            if s.trace_id == trace_id
            and s.service == "ferry-ha-replicator"
            and s.name == "ha replicate"
        ]
        return found or None

    (replicate,) = wait_for(replicated, 20, "the slave's replication span")
    assert replicate.kind == OTLP_CONSUMER
    assert replicate.parent_span_id == send_id  # applied under the creation context
    assert replicate.resource["service.instance.id"] == "broker-a-1"  # on the slave
    assert (trace_id, send_id) in replicate.links
    assert replicate.attributes["messaging.operation.name"] == "replicate"

    pair.stop_master()
    wait_for(lambda: broker_ids(pair.namesrv) == {1}, 15, "the master out of the route")
    got: list[MessageExt] = []
    with PullConsumer(
        "cg-ha-traced",
        pair.namesrv,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        poll_namesrv_interval_ms=300,
        suspend_ms=500,
    ) as consumer:
        consumer.subscribe(TOPIC)
        wait_for(lambda: got.extend(consumer.poll(timeout=0.5)) or got, 30, "a read from the slave")
    assert got[0].properties["traceparent"].split("-")[1:3] == [trace_id, send_id]
    receive = next(s for s in spans.get_finished_spans() if s.name == f"receive {TOPIC}")
    assert [
        (format(ln.context.trace_id, "032x"), format(ln.context.span_id, "016x"))
        for ln in receive.links
    ] == [(trace_id, send_id)]

    # the pull was served by the slave's remoting
    def slave_pull() -> bool:
        return any(
            s.name == f"pull {TOPIC}"
            and s.service == "ferry-broker-remoting"
            and s.resource.get("service.instance.id") == "broker-a-1"
            for s in sink.snapshot()
        )

    wait_for(slave_pull, 15, "a pull span of the slave's remoting")
