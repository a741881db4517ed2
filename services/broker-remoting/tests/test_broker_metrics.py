"""BrokerMetrics without a broker: a busy Prometheus port costs the endpoint, not the broker;
traffic counters are read from BrokerStats by topic and group."""

from __future__ import annotations

import socket
from pathlib import Path

from ferry.remoting.broker_metrics import BrokerMetrics, _by_topic
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.stats import BrokerStats
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
        broker_metrics = BrokerMetrics(config, stats, ConsumerOffsetTable(tmp_path))
        assert broker_metrics.endpoint is None
        assert broker_metrics.start() == ""
        assert stats.on_latency is not None  # the instruments still work (OTLP, LOG)
        broker_metrics.close()
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
