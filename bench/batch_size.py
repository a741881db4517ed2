"""send_batch throughput by batch size and threads, send_async by auto-batch size, and
PullConsumer throughput by pull size and buffer, on one local cluster (docs/benchmarks.md,
"Batch size, for scale" and "Pulls from the log files, and what did not help"), and the SDK's
encoding of a plain batch against the general path.

    uv run --frozen --all-packages python bench/batch_size.py [--runs 3] [--messages 100000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import client_throughput

from ferry.client import Admin, Message, Producer
from ferry.runtime.launcher import start_local_cluster

SHAPES = ((128, 4), (512, 4), (1000, 4), (1000, 1), (250, 4))
# (messages per pull, pull_threshold_for_queue): the consumer's buffer bounds what is in flight
PULLS = ((256, 1000), (256, 4000), (1000, 4000), (32, 1000))
# send_async's auto-batch limits (batch_max_count, batch_max_bytes)
AUTO_BATCHES = ((128, 256 * 1024), (256, 512 * 1024), (512, 1024 * 1024))


def send_async_flood(namesrv: str, topic: str, count: int, max_count: int, max_bytes: int) -> float:
    """`count` send_async calls of 1 KB from one thread until every Future is done."""
    with Producer(
        "bench-auto-batch",
        namesrv,
        send_timeout_ms=30_000,
        batch_max_count=max_count,
        batch_max_bytes=max_bytes,
    ) as producer:
        producer.send(Message(topic, b"x" * 1024))  # the route, before timing
        started = time.perf_counter()
        futures = [producer.send_async(Message(topic, b"x" * 1024)) for _ in range(count)]
        for future in futures:
            future.result(timeout=300)
        return count / (time.perf_counter() - started)


def encode_costs(producer: Producer, rounds: int) -> dict[str, list[float]]:
    """µs per message of encoding 128 plain 1 KB messages: _prepare (general) vs the plain
    one-pass path send_batch takes."""
    msgs = [Message("BatchSize", b"x" * 1024) for _ in range(128)]
    out: dict[str, list[float]] = {"general": [], "plain": []}
    for _ in range(rounds):
        for name, fn in (("general", producer._prepare), ("plain", producer._prepare_plain_batch)):
            started = time.perf_counter()
            for _ in range(300):
                fn(msgs)
            out[name].append((time.perf_counter() - started) / 300 / 128 * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    rates: dict[tuple[int, int], list[float]] = {}
    pulls: dict[tuple[int, int], list[float]] = {}
    floods: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        try:
            pids = [sp.pid for sp in cluster.processes]
            for run in range(args.runs):
                for batch, threads in SHAPES:
                    topic = f"Batch{batch}x{threads}r{run}"
                    with Admin(cluster.namesrv_addr) as admin:
                        admin.create_topic(topic, 4, 4)
                    client_throughput.settle(pids)
                    rate, _ = client_throughput.produce_batches(
                        cluster.namesrv_addr, topic, args.messages, batch, threads
                    )
                    rates.setdefault((batch, threads), []).append(rate)
            with Admin(cluster.namesrv_addr) as admin:
                admin.create_topic("PullSizes", 4, 4)
            _, stored = client_throughput.produce_batches(
                cluster.namesrv_addr, "PullSizes", args.messages, 128, 4
            )
            for run in range(args.runs):
                for size, threshold in PULLS:
                    client_throughput.settle(pids)
                    rate = client_throughput.consume(
                        cluster.namesrv_addr,
                        "PullSizes",
                        f"bench-pull-{size}-{threshold}-{run}",
                        stored,
                        size,
                        threshold,
                    )
                    pulls.setdefault((size, threshold), []).append(rate)
            for run in range(args.runs):
                for max_count, max_bytes in AUTO_BATCHES:
                    topic = f"AutoBatch{max_count}r{run}"
                    with Admin(cluster.namesrv_addr) as admin:
                        admin.create_topic(topic, 4, 4)
                    client_throughput.settle(pids)
                    rate = send_async_flood(
                        cluster.namesrv_addr, topic, args.messages, max_count, max_bytes
                    )
                    floods.setdefault(max_count, []).append(rate)
            with Producer("bench-encode", cluster.namesrv_addr) as producer:
                costs = encode_costs(producer, 5)
        finally:
            cluster.stop()
    print(f"\nsend_batch, 1 KB, {args.messages:,} messages, {args.runs} rounds: msg/s")
    for (batch, threads), values in rates.items():
        print(
            f"  {batch:>5} per request x {threads} thread(s): {statistics.median(values):>9,.0f}"
            f"  ({min(values):,.0f}-{max(values):,.0f})"
        )
    print(f"PullConsumer from the first offset, {args.messages:,} stored: msg/s")
    for (size, threshold), values in pulls.items():
        print(
            f"  pulls of {size:>4}, {threshold:>4} buffered per queue: "
            f"{statistics.median(values):>9,.0f}  ({min(values):,.0f}-{max(values):,.0f})"
        )
    print(f"{args.messages:,} send_async calls, auto-batches of at most: msg/s")
    for max_count, values in floods.items():
        print(
            f"  {max_count:>4} messages: {statistics.median(values):>9,.0f}"
            f"  ({min(values):,.0f}-{max(values):,.0f})"
        )
    print("encoding 128 plain messages, µs per message (5 rounds of 300 batches):")
    for name, values in costs.items():
        print(f"  {name:<8} {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")


if __name__ == "__main__":
    main()
