"""What one send costs on ferry.client.aio against the sync SDK, on one local cluster.

    uv run --frozen --all-packages python bench/aio_send_latency.py [--rounds 5]
        [--sends 2000] [--body 128] [--inflight 64] [--messages 20000]

Rounds alternate between the workloads so that each sees the same cluster and load:
- sync send: Producer.send, one in flight (µs per send, p50 and p99);
- aio send: ferry.client.aio Producer.send from one task, one in flight (what the gRPC proxy
  pays per SendMessage when its clients send one at a time);
- aio x64: 64 tasks each awaiting send() in a loop (messages per second; auto-batched).
Each round has its own producers (started and warmed up outside the timing). The table gives
the median of the rounds' figures and their spread (min-max); the aio/sync p50 ratio is taken
round by round, so a slow round moves both sides.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from common import Figure, percentile, report

from ferry.admin import Admin
from ferry.client import Message
from ferry.client import Producer as SyncProducer
from ferry.client.aio import Producer as AioProducer
from ferry.runtime.launcher import start_local_cluster

WARM_UP = 300


def sync_samples(namesrv: str, topic: str, sends: int, body: bytes) -> list[float]:
    with SyncProducer("bench-aio-lat-sync", namesrv) as producer:
        for _ in range(WARM_UP):
            producer.send(Message(topic, body))
        took = []
        for _ in range(sends):
            started = time.perf_counter()
            producer.send(Message(topic, body))
            took.append((time.perf_counter() - started) * 1e6)
    return took


async def aio_samples(namesrv: str, topic: str, sends: int, body: bytes) -> list[float]:
    async with AioProducer("bench-aio-lat-aio", namesrv) as producer:
        for _ in range(WARM_UP):
            await producer.send(Message(topic, body))
        took = []
        for _ in range(sends):
            started = time.perf_counter()
            await producer.send(Message(topic, body))
            took.append((time.perf_counter() - started) * 1e6)
    return took


async def aio_throughput(namesrv: str, topic: str, count: int, tasks: int, body: bytes) -> float:
    async with AioProducer("bench-aio-lat-many", namesrv, send_timeout_ms=30_000) as producer:
        for _ in range(WARM_UP):
            await producer.send(Message(topic, body))
        each = count // tasks

        async def sender() -> None:
            for _ in range(each):
                await producer.send(Message(topic, body))

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(tasks)))
        return each * tasks / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--body", type=int, default=128)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    body = b"x" * args.body
    rows: dict[str, list[float]] = {
        k: [] for k in ("sync p50", "sync p99", "aio p50", "aio p99", "ratio", "many")
    }
    with tempfile.TemporaryDirectory() as data, start_local_cluster(data) as cluster:
        namesrv = cluster.namesrv_addr
        with Admin(namesrv) as admin:
            for name in ("LatSync", "LatAio", "LatMany"):
                admin.create_topic(name, 4, 4)
        for _ in range(args.rounds):
            sync = sync_samples(namesrv, "LatSync", args.sends, body)
            aio = asyncio.run(aio_samples(namesrv, "LatAio", args.sends, body))
            many = asyncio.run(
                aio_throughput(namesrv, "LatMany", args.messages, args.inflight, body)
            )
            rows["sync p50"].append(percentile(sync, 0.5))
            rows["sync p99"].append(percentile(sync, 0.99))
            rows["aio p50"].append(percentile(aio, 0.5))
            rows["aio p99"].append(percentile(aio, 0.99))
            rows["ratio"].append(percentile(aio, 0.5) / percentile(sync, 0.5))
            rows["many"].append(many)
            print(
                f"round: sync p50 {rows['sync p50'][-1]:.0f} µs, aio p50 {rows['aio p50'][-1]:.0f}"
                f" µs, ratio {rows['ratio'][-1]:.2f}, aio x{args.inflight} {many:,.0f} msg/s",
                flush=True,
            )
    figures = [
        Figure("sync send p50, 1 in flight", "µs", rows["sync p50"]),
        Figure("sync send p99, 1 in flight", "µs", rows["sync p99"]),
        Figure("aio send p50, 1 in flight", "µs", rows["aio p50"]),
        Figure("aio send p99, 1 in flight", "µs", rows["aio p99"]),
        Figure("aio/sync p50 ratio", "x", rows["ratio"]),
        Figure(f"aio send x{args.inflight} tasks", "msg/s", rows["many"]),
    ]
    report(f"aio send latency {args.body} B", figures)
    print(f"ratio stdev across rounds: {statistics.pstdev(rows['ratio']):.3f}")


if __name__ == "__main__":
    main()
