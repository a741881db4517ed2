"""End-to-end latency, path by path: which part of send -> listener costs what.

    uv run --frozen --all-packages --group bench python bench/e2e_paths.py [--rate 2000]
        [--seconds 5] [--runs 3] [--only send_async]

One local cluster (ASYNC_FLUSH), 1 KB bodies stamped with perf_counter_ns at the send call,
at a steady rate; p50 and p99 in µs of each path, median over rounds (min-max):
- sync send alone (the send's round trip, SDK -> remoting -> store -> back);
- sync send -> PullConsumer.poll in a thread (adds the held pull's way back);
- send_async -> PullConsumer (adds the SDK's hand-off to its I/O thread and auto-batching);
- send_async -> PushConsumer listener (adds the push consumer's consume threads): the
  peers table's "end to end" row.
"""

from __future__ import annotations

import argparse
import struct
import tempfile
import threading
import time
from collections.abc import Callable

import push_consumer
from common import paced, percentile

from ferry.admin import Admin
from ferry.client import Message, Producer, PullConsumer
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 1024
STAMP = struct.Struct(">q")
QUEUES = 4


def stamped_body() -> bytes:
    return STAMP.pack(time.perf_counter_ns()) + BODY[8:]


def sync_alone(namesrv: str, topic: str, rate: int, seconds: float) -> list[float]:
    took: list[float] = []
    with Producer("bench-e2e-sync", namesrv) as producer:

        def send() -> None:
            body = stamped_body()
            producer.send(Message(topic, body))
            took.append((time.perf_counter_ns() - STAMP.unpack_from(body)[0]) / 1000)

        paced(rate, seconds, send)
    return took


def poll_latencies(
    namesrv: str, topic: str, group: str, send_all: Callable[[Producer], int]
) -> list[float]:
    """µs from each message's stamp to PullConsumer.poll returning it in a thread, for the
    stamped messages send_all sends (it returns how many)."""
    samples: list[float] = []
    stop = threading.Event()
    consumer = PullConsumer(group, namesrv)
    consumer.subscribe(topic)

    def read() -> None:
        while not stop.is_set():
            msgs = consumer.poll(0.2)
            now = time.perf_counter_ns()
            samples.extend((now - STAMP.unpack_from(m.body)[0]) / 1000 for m in msgs)

    with consumer, Producer(f"bench-{group}", namesrv) as producer:
        while not consumer.assignment():
            consumer.poll(0.05)
        reader = threading.Thread(target=read)
        reader.start()
        total = send_all(producer)
        deadline = time.monotonic() + 30
        while len(samples) < total and time.monotonic() < deadline:
            time.sleep(0.05)  # wait-ok: the last deliveries
        stop.set()
        reader.join()
    return samples


def to_pull(namesrv: str, topic: str, rate: int, seconds: float, use_async: bool) -> list[float]:
    def send_all(producer: Producer) -> int:
        send = producer.send_async if use_async else producer.send
        return paced(rate, seconds, lambda: send(Message(topic, stamped_body())))

    return poll_latencies(namesrv, topic, f"cg-{topic}", send_all)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="paths whose name holds this text")
    args = parser.parse_args()
    paths: dict[str, Callable[[str, str], list[float]]] = {
        "sync send alone": lambda ns, t: sync_alone(ns, t, args.rate, args.seconds),
        "sync send -> PullConsumer": lambda ns, t: to_pull(ns, t, args.rate, args.seconds, False),
        "send_async -> PullConsumer": lambda ns, t: to_pull(ns, t, args.rate, args.seconds, True),
        "send_async -> PushConsumer": lambda ns, t: push_consumer.latency(
            ns, t, f"cg-{t}", args.rate, args.seconds
        ),
    }
    paths = {name: fn for name, fn in paths.items() if args.only in name}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        try:
            ns = cluster.namesrv_addr
            for run in range(args.runs):
                for i, (name, fn) in enumerate(paths.items()):
                    topic = f"E2E{run}x{i}"
                    with Admin(ns) as admin:
                        admin.create_topic(topic, QUEUES, QUEUES)
                    samples = fn(ns, topic)
                    figures[name].append((percentile(samples, 0.5), percentile(samples, 0.99)))
                print(f"round {run + 1} done", flush=True)
        finally:
            cluster.stop()
    print(f"\n{args.rate} msg/s for {args.seconds} s, 1 KB, {args.runs} rounds; µs")
    print(f"{'path':<30} {'p50 median (min-max)':>24} {'p99 median (min-max)':>26}")
    for name, rows in figures.items():
        p50 = sorted(r[0] for r in rows)
        p99 = sorted(r[1] for r in rows)
        print(
            f"{name:<30} {p50[len(p50) // 2]:>8,.0f} ({p50[0]:,.0f}-{p50[-1]:,.0f})"
            f"{p99[len(p99) // 2]:>12,.0f} ({p99[0]:,.0f}-{p99[-1]:,.0f})"
        )


if __name__ == "__main__":
    main()
