"""What telemetry costs on the send path: produce throughput and sync send latency with
tracing off, sampled at 1 %, and on (every message traced), plus metrics on (PROM) alone.

    uv run python bench/tracing_cost.py [--runs 3] [--messages 50000] [--latency-samples 3000]

Each mode runs in its own process (a process has one tracer provider) against its own local
cluster whose services get the mode's OTEL_* variables; spans go over OTLP/HTTP to a receiver
in the parent process that answers and drops them (what a collector does, minus the storage).
The SDK uses the same sampler as the services (parent-based, trace-id ratio at 1 %).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from client_throughput import produce_batches, sync_latency
from common import Figure, report

MODES = {
    "off": {},
    "sampled 1%": {
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.01",
    },
    "on": {"OTEL_TRACES_SAMPLER": "parentbased_always_on"},
    "metrics PROM, tracing off": {},
}


class DropSink:
    """An OTLP/HTTP endpoint that counts requests and throws the spans away."""

    def __init__(self) -> None:
        sink = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                sink.requests += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def run_mode(mode: str, messages: int, samples: int) -> dict[str, float]:
    """In the child: a cluster with this mode's telemetry, then the workloads."""
    from ferry.admin import Admin
    from ferry.runtime.launcher import start_local_cluster
    from ferry.runtime.telemetry import setup_telemetry, shutdown_telemetry

    tracing = mode not in ("off", "metrics PROM, tracing off")
    overrides = {"metricsExporterType": "PROM", "metricsPromExporterPort": "0"}
    if mode != "metrics PROM, tracing off":
        overrides = {}
    if tracing:
        setup_telemetry("bench-client")  # the SDK's provider, from the same variables
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data, overrides=overrides, env=dict(os.environ))
        try:
            namesrv = cluster.namesrv_addr
            with Admin(namesrv) as admin:
                admin.create_topic("Cost", 4, 4)
            rate, _ = produce_batches(namesrv, "Cost", messages, 128, 4)
            p50, p99, sync_rate = sync_latency(namesrv, "CostLat", samples)
        finally:
            cluster.stop()
            shutdown_telemetry()
    return {"produce": rate, "p50": p50, "p99": p99, "sync": sync_rate}


def hook_costs() -> list[Figure]:
    """ns per call of what the hot paths run for telemetry, off and on (no span made)."""
    import timeit

    from ferry.protocol.record import encode_properties, encode_record
    from ferry.remoting.send_span import record_ids
    from ferry.runtime import telemetry

    unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    props = encode_properties({"KEYS": "k", "UNIQ_KEY": "0" * 32})
    frame = b"".join(encode_record(b"Cost", b"x" * 1024, props) for _ in range(128))

    def ns(stmt: Any, number: int = 200_000) -> list[float]:
        return [t / number * 1e9 for t in timeit.repeat(stmt, number=number, repeat=5)]

    baseline = ns(lambda: None)  # the machine's speed: a hook cannot cost less than this
    off = ns(lambda: telemetry.child_span("t", "store append", unsampled))
    telemetry.enable_for_tests()
    on = ns(lambda: telemetry.child_span("t", "store append", unsampled))
    scan = ns(lambda: telemetry.sampled_contexts(frame), number=20_000)
    ids = ns(lambda: record_ids(frame, 128), number=20_000)
    return [
        Figure("hook: baseline, an empty Python call", "ns/call", baseline),
        Figure("hook: store span check, tracing off", "ns/call", off),
        Figure("hook: store span check, tracing on, parent not sampled", "ns/call", on),
        Figure("hook: feed scan of 128 x 1 KB records for traceparents", "ns/batch", scan),
        Figure("hook: a traced send's msg ids found in 128 x 1 KB records", "ns/batch", ids),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--latency-samples", type=int, default=3000)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.messages, args.latency_samples)))
        return
    sink = DropSink()
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for _ in range(args.runs):
        for mode, variables in MODES.items():  # interleaved: machine noise hits every mode
            env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
            if variables or mode == "on":
                env |= {
                    "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
                    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                    **variables,
                }
            cmd = [
                sys.executable,
                __file__,
                "--mode",
                mode,
                "--messages",
                str(args.messages),
                "--latency-samples",
                str(args.latency_samples),
            ]
            out = subprocess.run(cmd, env=env, check=False, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"mode {mode!r} failed:\n{out.stderr[-4000:]}")
            results[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    figures: list[Figure] = []
    for mode, runs in results.items():
        figures += [
            Figure(f"{mode}: produce, send_batch 128 x 1 KB, 4 threads", "msg/s",
                   [r["produce"] for r in runs]),
            Figure(f"{mode}: sync send 1 KB, one in flight", "msg/s", [r["sync"] for r in runs]),
            Figure(f"{mode}: sync send latency p50", "µs", [r["p50"] for r in runs]),
            Figure(f"{mode}: sync send latency p99", "µs", [r["p99"] for r in runs]),
        ]  # fmt: skip
    report("tracing cost", [*figures, *hook_costs()])
    print(f"(the OTLP receiver took {sink.requests} export requests)")


if __name__ == "__main__":
    main()
