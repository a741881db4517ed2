"""What metrics cost a send or a pull in broker-remoting: the latency hook BrokerMetrics
installs (a prometheus_client Histogram observe per request; the traffic counters are plain
ints read at scrape time and cost nothing here), against the OpenTelemetry histogram record it
replaced and against a bare dict-of-ints histogram. Also the time of one collection.

    uv run python bench/metrics_cost.py [--calls 200000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import bisect
import tempfile
import timeit
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from prometheus_client import CollectorRegistry

from ferry.remoting.broker_metrics import BrokerMetrics
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.stats import BrokerStats
from ferry.runtime import metrics
from ferry.runtime.config import BrokerConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    stats = BrokerStats()
    registry = CollectorRegistry()
    with tempfile.TemporaryDirectory() as tmp:
        config = BrokerConfig(store_endpoint="tcp://127.0.0.1:1")
        broker = BrokerMetrics(config, stats, ConsumerOffsetTable(Path(tmp)), registry=registry)
        hook = stats.on_latency
        assert hook is not None

        def ferry_hook() -> None:
            hook("send_message", "success", 2.5)

        reader = InMemoryMetricReader()
        bounds = metrics.LATENCY_BUCKETS_MS
        view = View(
            instrument_name="h", aggregation=ExplicitBucketHistogramAggregation(boundaries=bounds)
        )
        provider = MeterProvider(metric_readers=[reader], views=[view])
        otel = provider.get_meter("bench").create_histogram("h", unit="ms")

        def otel_record() -> None:
            otel.record(2.5, {"request_code": "send_message", "invocation_status": "success"})

        counts: dict[tuple[str, str], list[int]] = {}

        def plain_ints() -> None:
            row = counts.get(("send_message", "success"))
            if row is None:
                row = counts[("send_message", "success")] = [0] * (len(bounds) + 1)
            row[bisect.bisect_left(bounds, 2.5)] += 1

        for i in range(200):
            stats.count_put(f"Topic{i}", 10, 1000)
        print(f"ns per call, best of {args.repeat} x {args.calls:,}")
        for name, fn in (
            ("BrokerMetrics latency hook (prometheus_client)", ferry_hook),
            ("OpenTelemetry histogram record (before)", otel_record),
            ("dict of plain ints (floor)", plain_ints),
        ):
            best = min(timeit.repeat(fn, number=args.calls, repeat=args.repeat))
            print(f"  {name}: {best / args.calls * 1e9:,.0f}")
        snap = min(timeit.repeat(lambda: metrics.snapshot(registry), number=50, repeat=3))
        print(f"one snapshot of the broker's registry, 200 topics: {snap / 50 * 1e6:,.0f} µs")
        broker.close()
        provider.shutdown()


if __name__ == "__main__":
    main()
