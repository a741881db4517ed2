"""The broker group's one Prometheus scrape target (metricsExporterType=PROM).

broker-remoting serves GET /metrics on metricsPromExporterHost:metricsPromExporterPort (5557,
as RocketMQ). At each scrape it renders its own metrics and asks the group's other processes
(store, index, scheduler, ha-replicator) for theirs with MetricsRequest, each sample labelled
with the process it came from. The scrape runs on the HTTP server's thread with its own ZeroMQ
sockets, never on the service loop; a process that does not answer within the timeout is left
out of that scrape (and named in ferry_scrape_errors).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import zmq

from ferry.protocol.messages import (
    MetricFamily,
    MetricSample,
    MetricsReply,
    MetricsRequest,
)
from ferry.protocol.rpc import BlockingClient
from ferry.runtime import metrics

log = logging.getLogger("ferry.prometheus")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PEER_TIMEOUT_MS = 1000
SILENT_PEER_TIMEOUT_MS = 100


class GroupGatherer:
    """Asks each (process name, endpoint) for its metrics at scrape time."""

    def __init__(self, peers: Sequence[tuple[str, str]], timeout_ms: int = PEER_TIMEOUT_MS):
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._timeout_ms = timeout_ms
        self._peers = [(name, BlockingClient(endpoint, self._ctx)) for name, endpoint in peers]
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

    def gather(self, own: str, labels: Mapping[str, str]) -> list[MetricFamily]:
        parts: list[tuple[Mapping[str, str], Sequence[MetricFamily]]] = [
            ({**labels, "process": own}, metrics.snapshot())
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
            "ferry_scrape_errors",
            "gauge",
            "processes of the broker group that did not answer this scrape",
            [MetricSample("ferry_scrape_errors", {**labels, "process": n}, 1.0) for n in missing],
        )
        return [*metrics.merge(parts), errors]

    def close(self) -> None:
        with self._lock:
            for _, client in self._peers:
                client.close()
            self._ctx.term()


class PrometheusEndpoint:
    """GET /metrics on a thread; `render` builds the text at each scrape."""

    def __init__(self, host: str, port: int, render: Callable[[], str]) -> None:
        def handle(req: BaseHTTPRequestHandler) -> None:
            if req.path.split("?", 1)[0] != "/metrics":
                req.send_error(404, "only /metrics is served")
                return
            try:
                body = render().encode()
            except Exception:
                log.warning("scrape failed", exc_info=True)
                req.send_error(500, "scrape failed")
                return
            req.send_response(200)
            req.send_header("Content-Type", CONTENT_TYPE)
            req.send_header("Content-Length", str(len(body)))
            req.end_headers()
            req.wfile.write(body)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                handle(self)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="ferry-prometheus", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
