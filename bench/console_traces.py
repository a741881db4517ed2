"""The console's trace store: OTLP ingest rate and the time to find a message's trace.

    uv run python bench/console_traces.py [--runs 3] [--spans 200000] [--batch 512]

Over HTTP: a name server and the console as processes (launcher); export requests of --batch
spans (protobuf, as the SDK's BatchSpanProcessor sends them: 512 by default) posted to
/v1/traces from 2 threads until --spans are stored. Each message has a send span with its
message id, a store span (its child) and one batch receive span in another trace links to
the sends of its batch. Then `/traces?msg_id=` (the waterfall page, links followed) is timed
for random message ids, and the store lookup alone (TraceStore.traces_of_message + spans)
in-process on the same file.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import Figure, percentile, report
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ferry.console.trace_store import TraceStore
from ferry.runtime.launcher import start_service

MESSAGES_PER_RECEIVE = 16


def _kv(key: str, value: str) -> common_pb2.KeyValue:
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))


GROUP_SPANS = 2 * MESSAGES_PER_RECEIVE + 1


def export_body(first_msg: int, groups: int) -> bytes:
    """`groups` groups of 16 messages: per message a send and a store span, per group one
    receive span linked to the 16 sends."""
    spans = groups * GROUP_SPANS
    out: list[trace_pb2.Span] = []
    links: list[trace_pb2.Span.Link] = []
    now = time.time_ns()
    i = first_msg
    while len(out) < spans:
        trace_id = random.randbytes(16)
        send_id = random.randbytes(8)
        out.append(
            trace_pb2.Span(
                trace_id=trace_id,
                span_id=send_id,
                name="send BenchTopic",
                kind=trace_pb2.Span.SPAN_KIND_PRODUCER,
                start_time_unix_nano=now,
                end_time_unix_nano=now + 900_000,
                attributes=[
                    _kv("messaging.system", "rocketmq"),
                    _kv("messaging.destination.name", "BenchTopic"),
                    _kv("messaging.message.id", f"MSG{i:028X}"),
                ],
            )
        )
        out.append(
            trace_pb2.Span(
                trace_id=trace_id,
                span_id=random.randbytes(8),
                parent_span_id=send_id,
                name="store append",
                kind=trace_pb2.Span.SPAN_KIND_SERVER,
                start_time_unix_nano=now + 100_000,
                end_time_unix_nano=now + 600_000,
            )
        )
        links.append(trace_pb2.Span.Link(trace_id=trace_id, span_id=send_id))
        i += 1
        if len(links) == MESSAGES_PER_RECEIVE:
            out.append(
                trace_pb2.Span(
                    trace_id=random.randbytes(16),
                    span_id=random.randbytes(8),
                    name="receive BenchTopic",
                    kind=trace_pb2.Span.SPAN_KIND_CLIENT,
                    start_time_unix_nano=now + 2_000_000,
                    end_time_unix_nano=now + 2_100_000,
                    links=links,
                )
            )
            links = []
    request = trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=resource_pb2.Resource(attributes=[_kv("service.name", "bench")]),
                scope_spans=[trace_pb2.ScopeSpans(spans=out)],
            )
        ]
    )
    return bytes(request.SerializeToString())


def post(url: str, body: bytes) -> None:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/x-protobuf"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        reply.read()


def one_run(spans: int, batch: int, lookups: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "FERRY_sampleIntervalMs": "60000"}
        namesrv = start_service("namesrv", ["--set", "listenPort=0"], env=env)
        console = start_service(
            "console",
            ["--namesrv", namesrv.endpoints["addr"], "--port", "0", "--data-dir", tmp],
            env=env,
        )
        try:
            url = console.endpoints["url"]
            groups = max(1, batch // GROUP_SPANS)
            msgs_per_batch = groups * MESSAGES_PER_RECEIVE
            batch = groups * GROUP_SPANS
            bodies = [
                export_body(b * msgs_per_batch, groups) for b in range(max(1, spans // batch))
            ]
            total_msgs = len(bodies) * msgs_per_batch
            started = time.perf_counter()
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda body: post(url + "/v1/traces", body), bodies))
            ingest = len(bodies) * batch / (time.perf_counter() - started)
            page_ms: list[float] = []
            for _ in range(lookups):
                msg_id = f"MSG{random.randrange(total_msgs):028X}"
                t0 = time.perf_counter()
                with urllib.request.urlopen(f"{url}/traces?msg_id={msg_id}", timeout=60) as r:
                    page = r.read()
                page_ms.append((time.perf_counter() - t0) * 1000)
                assert b"receive BenchTopic" in page, "the linked batch receive is shown"
        finally:
            console.stop()
            namesrv.stop()
        store = TraceStore(Path(tmp) / "traces.sqlite3", max_bytes=1 << 40, retention_ms=1 << 40)
        store_us: list[float] = []
        for _ in range(lookups * 10):
            msg_id = f"MSG{random.randrange(total_msgs):028X}"
            t0 = time.perf_counter()
            found = store.spans(store.traces_of_message(msg_id))
            store_us.append((time.perf_counter() - t0) * 1e6)
            assert len(found) >= 3
        store.close()
    return {
        "ingest": ingest,
        "page p50": percentile(page_ms, 0.5),
        "page p99": percentile(page_ms, 0.99),
        "store p50": percentile(store_us, 0.5),
        "store p99": percentile(store_us, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--lookups", type=int, default=200)
    args = parser.parse_args()
    runs = [one_run(args.spans, args.batch, args.lookups) for _ in range(args.runs)]

    def fig(name: str, key: str, unit: str) -> Figure:
        return Figure(name, unit, [r[key] for r in runs])

    n = f"{args.spans:,} spans stored"
    report(
        "console traces",
        [
            fig(f"OTLP/HTTP ingest, protobuf, {args.batch} spans a request", "ingest", "spans/s"),
            fig(f"message trace page (/traces?msg_id=), {n}, p50", "page p50", "ms"),
            fig(f"message trace page (/traces?msg_id=), {n}, p99", "page p99", "ms"),
            fig(f"TraceStore lookup with links, {n}, p50", "store p50", "µs"),
            fig(f"TraceStore lookup with links, {n}, p99", "store p99", "µs"),
        ],
    )


if __name__ == "__main__":
    main()
