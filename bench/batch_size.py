"""send_batch throughput by batch size and threads, send_async by auto-batch size, and
PullConsumer throughput by pull size and buffer, on one local cluster (docs/perf-notes/:
2026-11-22-broker-optimisation.md, "Batch size, for scale", and 2026-11-25-log-file-pulls.md),
and the SDK's encoding of a plain batch against the general path.

    uv run --frozen --all-packages python bench/batch_size.py [--runs 3] [--messages 100000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import client_throughput

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.runtime.launcher import start_local_cluster

S = TypeVar("S", bound=tuple[int, int])
SHAPES = ((128, 4), (512, 4), (1000, 4), (1000, 1), (250, 4))
# (messages per pull, pull_threshold_for_queue): the consumer's buffer bounds what is in flight
PULLS = ((256, 1000), (512, 2000), (256, 4000), (1000, 4000), (32, 1000))
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


def report(title: str, rows: dict[str, list[float]]) -> None:
    print(title)
    for label, values in rows.items():
        median = statistics.median(values)
        print(f"  {label}: {median:>9,.0f}  ({min(values):,.0f}-{max(values):,.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        namesrv = cluster.namesrv_addr
        try:
            pids = [sp.pid for sp in cluster.processes]

            def rounds(shapes: Sequence[S], fn: Callable[[S, int], float]) -> dict[S, list[float]]:
                """Every shape once per round, on an idle cluster: {shape: [msg/s per round]}."""
                out: dict[S, list[float]] = {}
                for run in range(args.runs):
                    for shape in shapes:
                        client_throughput.settle(pids)
                        out.setdefault(shape, []).append(fn(shape, run))
                return out

            def topic(name: str) -> str:
                with Admin(namesrv) as admin:
                    admin.create_topic(name, 4, 4)
                return name

            rates = rounds(
                SHAPES,
                lambda shape, run: client_throughput.produce_batches(
                    namesrv, topic(f"Batch{shape[0]}x{shape[1]}r{run}"), args.messages, *shape
                )[0],
            )
            _, stored = client_throughput.produce_batches(
                namesrv, topic("PullSizes"), args.messages, 128, 4
            )
            pulls = rounds(
                PULLS,
                lambda shape, run: client_throughput.consume(
                    namesrv, "PullSizes", f"bench-pull-{shape[0]}-{shape[1]}-{run}", stored, *shape
                ),
            )
            floods = rounds(
                AUTO_BATCHES,
                lambda shape, run: send_async_flood(
                    namesrv, topic(f"AutoBatch{shape[0]}r{run}"), args.messages, *shape
                ),
            )
            with Producer("bench-encode", namesrv) as producer:
                costs = encode_costs(producer, 5)
        finally:
            cluster.stop()
    report(
        f"\nsend_batch, 1 KB, {args.messages:,} messages, {args.runs} rounds: msg/s",
        {f"{b:>5} per request x {t} thread(s)": v for (b, t), v in rates.items()},
    )
    report(
        f"PullConsumer from the first offset, {args.messages:,} stored: msg/s",
        {f"pulls of {n:>4}, {t:>4} buffered per queue": v for (n, t), v in pulls.items()},
    )
    report(
        f"{args.messages:,} send_async calls, auto-batches of at most: msg/s",
        {f"{n:>4} messages": v for (n, _), v in floods.items()},
    )
    print("encoding 128 plain messages, µs per message (5 rounds of 300 batches):")
    for name, values in costs.items():
        print(f"  {name:<8} {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")


if __name__ == "__main__":
    main()
