"""The broker's metrics (prometheus_client), and the broker group's Prometheus endpoint.

Traffic counters are read from BrokerStats at collection, so the send and pull paths pay
nothing for them; latencies go into a prometheus_client Histogram through
BrokerStats.on_latency (only when metrics are on). Consumer lag is computed at collection:
committed offsets against the store's max offsets, and the age of the first unconsumed
message, asked of the store on the collecting thread with its own socket.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import zmq
from prometheus_client import CollectorRegistry, Histogram

from ferry.protocol.codes import PullStatus
from ferry.protocol.messages import (
    StoreGetReply,
    StoreGetRequest,
    StoreQueueOffsetsReply,
    StoreQueueOffsetsRequest,
)
from ferry.protocol.names import RETRY_PREFIX
from ferry.protocol.record import iter_records
from ferry.protocol.rpc import BlockingClient
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.stats import BrokerStats
from ferry.runtime import metrics
from ferry.runtime.config import BrokerConfig
from ferry.runtime.metrics import Points
from ferry.runtime.prometheus import GroupScrape, PrometheusEndpoint
from ferry.runtime.security import settings

log = logging.getLogger("ferry.remoting.metrics")

LAG_CACHE_S = 0.5  # the two lag gauges of one collection share one pass over the store
STORE_TIMEOUT_MS = 1000


class LagProbe:
    """Consumer lag by (group, topic, queue): messages behind, and ms since the first
    unconsumed message was stored (0 when caught up)."""

    def __init__(self, ctx: zmq.Context[Any], store_endpoint: str, offsets: ConsumerOffsetTable):
        self._store = BlockingClient(
            store_endpoint,
            ctx,
            credentials=settings.inner_credentials(),
            curve=settings.curve_client(),
        )
        self._offsets = offsets
        self._lock = threading.Lock()
        self._rows: list[tuple[dict[str, str], int, float]] = []
        self._at = 0.0

    def rows(self) -> list[tuple[dict[str, str], int, float]]:
        with self._lock:
            if time.monotonic() - self._at > LAG_CACHE_S:
                self._rows = self._measure()
                self._at = time.monotonic()
            return self._rows

    def _entries(self) -> list[tuple[str, str, int, int]]:
        for _ in range(5):  # the loop thread may add a key while we copy
            try:
                return self._offsets.entries()
            except RuntimeError:
                continue
        return []

    def _measure(self) -> list[tuple[dict[str, str], int, float]]:
        by_topic: dict[str, list[tuple[str, int, int]]] = {}
        for group, topic, queue_id, offset in self._entries():
            by_topic.setdefault(topic, []).append((group, queue_id, offset))
        now_ms = time.time() * 1000
        out: list[tuple[dict[str, str], int, float]] = []
        for topic, rows in sorted(by_topic.items()):
            queue_ids = sorted({q for _, q, _ in rows})
            answer = self._store.call(StoreQueueOffsetsRequest(topic, queue_ids), STORE_TIMEOUT_MS)
            if answer is None or not isinstance(answer[0], StoreQueueOffsetsReply):
                continue
            max_offsets = {q.queue_id: q.max_offset for q in answer[0].queues}
            for group, queue_id, offset in rows:
                behind = max(0, max_offsets.get(queue_id, offset) - offset)
                age = self._age_ms(topic, queue_id, offset, now_ms) if behind else 0.0
                labels = {
                    "consumer_group": group,
                    "topic": topic,
                    "queue_id": str(queue_id),
                    "is_retry": _is_retry(topic),
                }
                out.append((labels, behind, age))
        return out

    def _age_ms(self, topic: str, queue_id: int, offset: int, now_ms: float) -> float:
        get = StoreGetRequest(topic, queue_id, offset, max_msgs=1)
        answer = self._store.call(get, STORE_TIMEOUT_MS)
        if answer is None:
            return 0.0
        reply, frames = answer
        if not isinstance(reply, StoreGetReply) or reply.status != PullStatus.FOUND or not frames:
            return 0.0
        for rec in iter_records(frames[0]):
            return max(0.0, now_ms - rec.store_timestamp)
        return 0.0

    def close(self) -> None:
        with self._lock:
            self._store.close()


class BrokerMetrics:
    """Registers the broker's metrics; serves /metrics when metricsExporterType is PROM."""

    def __init__(
        self,
        config: BrokerConfig,
        stats: BrokerStats,
        offsets: ConsumerOffsetTable,
        ha_endpoint: str = "",
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._stats = stats
        self._registry = metrics.registry() if registry is None else registry
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._lag = LagProbe(self._ctx, config.store_endpoint, offsets)
        observed: list[tuple[str, str, Callable[[], Points], str]] = [
            # (name, kind, points, help)
            (
                metrics.MESSAGES_IN,
                "counter",
                lambda: _by_topic(stats.puts),
                "messages stored, by topic",
            ),
            (
                metrics.THROUGHPUT_IN,
                "counter",
                lambda: _by_topic(stats.put_bytes),
                "bytes of messages stored, by topic",
            ),
            (
                metrics.MESSAGES_OUT,
                "counter",
                lambda: _by_topic(stats.gets),
                "messages pulled, by topic and consumer group",
            ),
            (
                metrics.THROUGHPUT_OUT,
                "counter",
                lambda: _by_topic(stats.get_bytes),
                "bytes of messages pulled, by topic and consumer group",
            ),
            (
                metrics.SEND_TO_DLQ,
                "counter",
                lambda: _by_topic(stats.dlq),
                "messages moved to a dead letter queue, by DLQ topic and group",
            ),
            (
                metrics.COMMIT_MESSAGES,
                "counter",
                lambda: _resolved(stats, "COMMIT"),
                "half messages committed (delivered to their topic)",
            ),
            (
                metrics.ROLLBACK_MESSAGES,
                "counter",
                lambda: _resolved(stats, "ROLLBACK"),
                "half messages rolled back",
            ),
            (
                metrics.CONSUMER_LAG_MESSAGES,
                "gauge",
                self._lag_messages,
                "messages stored and not yet consumed, by group and queue",
            ),
            (
                metrics.CONSUMER_LAG_LATENCY,
                "gauge",
                self._lag_latency,
                "age of the oldest unconsumed message, by group and queue",
            ),
        ]
        self._collectors: list[Any] = [
            metrics.observe(self._registry, name, kind, help, points)
            for name, kind, points, help in observed
        ]
        latency = Histogram(
            metrics.RPC_LATENCY,
            "send and pull handling time in the broker (pulls include long polling)",
            ("request_code", "invocation_status"),
            registry=self._registry,
            buckets=metrics.LATENCY_BUCKETS_MS,
        )
        self._collectors.append(latency)
        # one child per (request, outcome), kept: labels() takes the family's lock each time
        children: dict[tuple[str, str], Any] = {}

        def on_latency(request: str, outcome: str, ms: float) -> None:
            child = children.get((request, outcome))
            if child is None:
                child = children[(request, outcome)] = latency.labels(request, outcome)
            child.observe(ms)

        stats.on_latency = on_latency
        self._host = config.metrics_prom_exporter_host or config.listen_host
        self._port = config.metrics_prom_exporter_port
        self.endpoint: PrometheusEndpoint | None = None
        self._scrape: GroupScrape | None = None
        if config.metrics_exporter_type == "PROM":
            peers = [("broker-store", config.store_endpoint)]
            if config.index_endpoint:
                peers.append(("index", config.index_endpoint))
            if config.scheduler_endpoint:
                peers.append(("scheduler", config.scheduler_endpoint))
            if config.checkback_endpoint:
                peers.append(("checkback", config.checkback_endpoint))
            if ha_endpoint:
                peers.append(("ha-replicator", ha_endpoint))
            labels = {
                "cluster": config.broker_cluster_name,
                "node_type": "broker",
                "node_id": f"{config.broker_name}-{config.broker_id}",
            }
            self._scrape = GroupScrape(("broker-remoting", self._registry), peers, labels)

    def start(self) -> str:
        """Serves the endpoint; its host:port ("" without one)."""
        if self._scrape is None:
            return ""
        try:
            self.endpoint = PrometheusEndpoint(self._host, self._port, self._scrape)
        except OSError as exc:  # a busy port costs the endpoint, never the broker
            log.error("metrics endpoint %s:%d not served: %s", self._host, self._port, exc)
            return ""
        return f"{self.endpoint.host}:{self.endpoint.port}"

    def _lag_messages(self) -> Points:
        return [(float(behind), labels) for labels, behind, _ in self._lag.rows()]

    def _lag_latency(self) -> Points:
        return [(age, labels) for labels, _, age in self._lag.rows()]

    def close(self) -> None:
        self._stats.on_latency = None
        if self.endpoint is not None:
            self.endpoint.close()
        if self._scrape is not None:
            self._scrape.close()
        for collector in self._collectors:
            self._registry.unregister(collector)
        self._lag.close()
        self._ctx.term()


def _by_topic(table: dict[tuple[str, str], int]) -> Points:
    """(topic, group) counters as points; `dict(...)` copies atomically under the GIL."""
    out: list[tuple[float, Mapping[str, str]]] = []
    for (topic, group), value in dict(table).items():
        labels = {"topic": topic, "is_retry": _is_retry(topic)}
        if group:
            labels["consumer_group"] = group
        out.append((float(value), labels))
    return out


def _is_retry(topic: str) -> str:
    return "true" if topic.startswith(RETRY_PREFIX) else "false"


def _resolved(stats: BrokerStats, resolution: str) -> Points:
    return [(float(stats.transactions.get(resolution, 0)), {})]
