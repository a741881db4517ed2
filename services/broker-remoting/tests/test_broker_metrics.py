"""BrokerMetrics without a broker: a busy Prometheus port costs the endpoint, not the broker
(whose metrics still count); traffic counters are read from BrokerStats by topic and group."""

from __future__ import annotations

import socket
from pathlib import Path

from prometheus_client import CollectorRegistry

from ferry.remoting.broker_metrics import BrokerMetrics, _by_topic
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.stats import BrokerStats
from ferry.runtime import metrics
from ferry.runtime.config import BrokerConfig


def test_a_busy_port_leaves_the_broker_without_an_endpoint(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        config = BrokerConfig(
            store_endpoint="tcp://127.0.0.1:1",
            metrics_exporter_type="PROM",
            metrics_prom_exporter_port=taken.getsockname()[1],
        )
        stats = BrokerStats()
        registry = CollectorRegistry()
        offsets = ConsumerOffsetTable(tmp_path)
        broker_metrics = BrokerMetrics(config, stats, offsets, registry=registry)
        assert broker_metrics.start() == ""
        assert broker_metrics.endpoint is None
        assert stats.on_latency is not None  # the metrics still work (OTLP, LOG)
        stats.on_latency("send_message", "success", 2.0)
        stats.count_put("Orders", 3, 300)
        families = {f.name: f for f in metrics.snapshot(registry)}
        assert families["rocketmq_messages_in_total"].samples[0].value == 3.0
        count = [s for s in families["rocketmq_rpc_latency"].samples if s.name.endswith("_count")]
        assert [(s.labels, s.value) for s in count] == [
            ({"request_code": "send_message", "invocation_status": "success"}, 1.0)
        ]
        broker_metrics.close()
        # closed: its families leave the registry, and a new BrokerMetrics may register again
        assert metrics.snapshot(registry) == []
        BrokerMetrics(config, stats, offsets, registry=registry).close()
        assert stats.on_latency is None
    finally:
        taken.close()


def test_traffic_points_carry_topic_group_and_retry_labels() -> None:
    stats = BrokerStats()
    stats.count_put("Orders", 3, 300)
    stats.count_get("cg", "%RETRY%cg", 2, 100)
    assert list(_by_topic(stats.puts)) == [(3.0, {"topic": "Orders", "is_retry": "false"})]
    assert list(_by_topic(stats.get_bytes)) == [
        (100.0, {"topic": "%RETRY%cg", "is_retry": "true", "consumer_group": "cg"})
    ]
