"""asyncio produce throughput (ferry.client.aio) against the sync SDK's send_async, one run.

    uv run python bench/aio_produce.py [--runs 3] [--messages 100000]

On one local cluster, rounds alternate between the two SDKs so both see the same load.
Workloads, 1 KB bodies:
- sync send_async: single-message send_async calls from one thread (auto-batched), all
  Futures awaited (bench/client_throughput.py's workload);
- aio send_async: the same from one asyncio task, its Futures awaited in order;
- aio send x64 tasks: 64 tasks each awaiting send() in a loop (auto-batched too);
- aio send_batch: send_batch of 128 from 4 tasks, against sync send_batch of 128 on 4 threads.
Each figure comes with the SDK's CPU per message (getrusage) and the cluster's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time

from client_throughput import BODY, costed, produce_batches, send_async_singles
from common import Figure, report

from ferry.admin import Admin
from ferry.client import Message
from ferry.client.aio import Producer
from ferry.runtime.launcher import start_local_cluster

TASKS = 64


async def aio_send_async(namesrv: str, topic: str, count: int) -> float:
    async with Producer("bench-aio-async", namesrv, send_timeout_ms=30_000) as producer:
        await producer.send(Message(topic, BODY))  # the route, before timing
        started = time.perf_counter()
        futures = [producer.send_async(Message(topic, BODY)) for _ in range(count)]
        for fut in futures:  # in order, as the sync workload reads its Futures
            await fut
        return count / (time.perf_counter() - started)


async def aio_send_tasks(namesrv: str, topic: str, count: int) -> float:
    async with Producer("bench-aio-tasks", namesrv, send_timeout_ms=30_000) as producer:
        await producer.send(Message(topic, BODY))
        each = count // TASKS

        async def sender() -> None:
            for _ in range(each):
                await producer.send(Message(topic, BODY))

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(TASKS)))
        return each * TASKS / (time.perf_counter() - started)


async def aio_send_batches(namesrv: str, topic: str, count: int, batch: int = 128) -> float:
    async with Producer("bench-aio-batch", namesrv, send_timeout_ms=30_000) as producer:
        msgs = [Message(topic, BODY) for _ in range(batch)]
        await producer.send_batch(msgs)
        per_task = max(1, count // 4 // batch)

        async def sender() -> None:
            for _ in range(per_task):
                await producer.send_batch(msgs)

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(4)))
        return per_task * 4 * batch / (time.perf_counter() - started)


def one_round(namesrv: str, pids: list[int], tag: str, n: int) -> dict[str, dict[str, float]]:
    with Admin(namesrv) as admin:
        for name in ("SyncA", "AioA", "AioT", "SyncB", "AioB"):
            admin.create_topic(f"{name}{tag}", 4, 4)
    return {
        "sync_async": costed(pids, n, lambda: send_async_singles(namesrv, f"SyncA{tag}", n)),
        "aio_async": costed(pids, n, lambda: asyncio.run(aio_send_async(namesrv, f"AioA{tag}", n))),
        "aio_tasks": costed(pids, n, lambda: asyncio.run(aio_send_tasks(namesrv, f"AioT{tag}", n))),
        "sync_batch": costed(
            pids, n, lambda: produce_batches(namesrv, f"SyncB{tag}", n, 128, 4)[0]
        ),
        "aio_batch": costed(
            pids, n, lambda: asyncio.run(aio_send_batches(namesrv, f"AioB{tag}", n))
        ),
    }


LABELS = {
    "sync_async": "sync send_async, 1 KB singles, one thread",
    "aio_async": "aio send_async, 1 KB singles, one task",
    "aio_tasks": f"aio await send(), {TASKS} tasks",
    "sync_batch": "sync send_batch 128, 4 threads",
    "aio_batch": "aio send_batch 128, 4 tasks",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    rounds: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        try:
            pids = [sp.pid for sp in cluster.processes]
            for run in range(args.runs):
                rounds.append(one_round(cluster.namesrv_addr, pids, str(run), args.messages))
        finally:
            cluster.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    shown: list[Figure] = []
    for key, label in LABELS.items():
        shown.append(Figure(label, "msg/s", [r[key]["figure"] for r in rounds]))
        shown.append(Figure("  SDK CPU", "µs/msg", [r[key]["sdk_cpu_us"] for r in rounds]))
        shown.append(Figure("  cluster CPU", "µs/msg", [r[key]["cluster_cpu_us"] for r in rounds]))
    ratio = [r["aio_async"]["figure"] / r["sync_async"]["figure"] for r in rounds]
    shown.append(Figure("aio send_async / sync send_async", "ratio", ratio))
    report("asyncio produce against sync send_async", shown)


if __name__ == "__main__":
    main()
