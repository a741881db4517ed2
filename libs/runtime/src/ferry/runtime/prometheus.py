"""The broker group's one Prometheus scrape target (metricsExporterType=PROM).

broker-remoting serves GET /metrics on metricsPromExporterHost:metricsPromExporterPort (5557,
as RocketMQ) with prometheus_client's HTTP server (which answers any path alike), over a
registry holding one collector, GroupScrape. At each scrape it takes its own process's metrics
and asks the group's other processes (store, index, scheduler, ha-replicator) for theirs with
MetricsRequest, each sample labelled with the process it came from. The scrape runs on the
HTTP server's thread with its own ZeroMQ sockets, never on the service loop; a process that
does not answer within the timeout is left out of that scrape (and named in
ferry_scrape_errors).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import zmq
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric

from ferry.protocol.messages import MetricFamily, MetricSample, MetricsReply, MetricsRequest
from ferry.protocol.rpc import BlockingClient
from ferry.runtime import metrics
from ferry.runtime.security import settings

log = logging.getLogger("ferry.prometheus")

PEER_TIMEOUT_MS = 1000
SILENT_PEER_TIMEOUT_MS = 100
SCRAPE_ERRORS = "ferry_scrape_errors"
SCRAPE_ERRORS_HELP = "processes of the broker group that did not answer this scrape"


class GroupScrape:
    """A prometheus_client collector of the whole group: this process's registry, and each
    (process name, endpoint) peer's answer to a MetricsRequest, asked at collection."""

    def __init__(
        self,
        own: tuple[str, CollectorRegistry],
        peers: Sequence[tuple[str, str]],
        labels: Mapping[str, str],
        timeout_ms: int = PEER_TIMEOUT_MS,
    ) -> None:
        self._own_name, self._own = own
        self._labels = dict(labels)
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._timeout_ms = timeout_ms
        creds = settings.inner_credentials()
        self._peers = [
            (
                name,
                BlockingClient(
                    endpoint, self._ctx, credentials=creds, curve=settings.curve_client()
                ),
            )
            for name, endpoint in peers
        ]
        self._silent: set[str] = set()  # did not answer last time: asked with a short timeout
        self._lock = threading.Lock()

    def _ask(self, name: str, client: BlockingClient) -> list[MetricFamily] | None:
        timeout = SILENT_PEER_TIMEOUT_MS if name in self._silent else self._timeout_ms
        answer = client.call(MetricsRequest(), timeout)
        if answer is None or not isinstance(answer[0], MetricsReply):
            self._silent.add(name)
            return None
        self._silent.discard(name)
        return answer[0].families

    def gather(self) -> list[MetricFamily]:
        """Every process's families merged by name, and ferry_scrape_errors."""
        labels = self._labels
        parts: list[tuple[Mapping[str, str], Sequence[MetricFamily]]] = [
            ({**labels, "process": self._own_name}, metrics.snapshot(self._own))
        ]
        missing: list[str] = []
        with self._lock:
            for name, client in self._peers:
                families = self._ask(name, client)
                if families is None:
                    missing.append(name)
                else:
                    parts.append(({**labels, "process": name}, families))
        errors = MetricFamily(
            SCRAPE_ERRORS,
            "gauge",
            SCRAPE_ERRORS_HELP,
            [MetricSample(SCRAPE_ERRORS, {**labels, "process": n}, 1.0) for n in missing],
        )
        return [*merge(parts), errors]

    def collect(self) -> Iterable[Metric]:
        for fam in self.gather():
            metric = metrics.metric_of(fam)
            if metric is not None:
                yield metric

    def close(self) -> None:
        with self._lock:
            for _, client in self._peers:
                client.close()
            self._ctx.term()


def merge(
    parts: Iterable[tuple[Mapping[str, str], Sequence[MetricFamily]]],
) -> list[MetricFamily]:
    """Families from several processes as one exposition (a name may be written once): the
    samples of one name together, each with its process's extra labels."""
    by_name: dict[str, MetricFamily] = {}
    for extra, families in parts:
        for fam in families:
            samples = [MetricSample(s.name, {**extra, **s.labels}, s.value) for s in fam.samples]
            known = by_name.get(fam.name)
            if known is None:
                by_name[fam.name] = MetricFamily(fam.name, fam.kind, fam.help, samples)
            else:
                known.samples.extend(samples)
    return [by_name[name] for name in sorted(by_name)]


class PrometheusEndpoint:
    """prometheus_client's HTTP server for one collector, on its own daemon thread (it binds
    when made: OSError when the port is taken)."""

    def __init__(self, host: str, port: int, collector: GroupScrape) -> None:
        # a collector without names still answers prometheus_client's ?name[]= filter
        registry = CollectorRegistry(support_collectors_without_names=True)
        registry.register(collector)
        self._server, self._thread = start_http_server(port, host, registry)
        self.host = host
        self.port = int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
