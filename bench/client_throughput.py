"""Ferry end to end through the SDK, remoting and the store, on a local cluster.

    uv run python bench/client_throughput.py [--runs 3] [--messages 100000]

Measures, with 1 KB bodies: produce throughput with batches (send_batch of 128, 4 threads),
sync send latency p50/p99 (one in flight), and pull throughput (PullConsumer.poll).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

from common import Figure, percentile, report, timed

from ferry.client import Admin, ConsumeFromWhere, Message, Producer, PullConsumer
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 1024


def produce_batches(
    namesrv: str, topic: str, messages: int, batch: int, threads: int
) -> tuple[float, int]:
    """Returns (msg/s, messages stored), the warm-up batch included in the count."""
    per_thread = max(1, messages // threads // batch)

    def work() -> int:
        with Producer("bench-producer", namesrv) as producer:
            msgs = [Message(topic, BODY) for _ in range(batch)]
            producer.send_batch(msgs)  # warm the route

            def loop() -> None:
                for _ in range(per_thread):
                    producer.send_batch(msgs)

            pool = [threading.Thread(target=loop) for _ in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
        return per_thread * batch * threads

    return timed(work), per_thread * batch * threads + batch


def sync_latency(namesrv: str, topic: str, count: int) -> tuple[float, float, float]:
    with Producer("bench-latency", namesrv) as producer:
        for _ in range(200):  # warm up
            producer.send(Message(topic, BODY))
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            producer.send(Message(topic, BODY))
            samples.append((time.perf_counter() - started) * 1e6)
    return percentile(samples, 0.5), percentile(samples, 0.99), count / (sum(samples) / 1e6)


def consume(namesrv: str, topic: str, group: str, expected: int) -> float:
    def work() -> int:
        got = 0
        with PullConsumer(
            group, namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET, pull_batch_size=256
        ) as consumer:
            consumer.subscribe(topic)
            deadline = time.monotonic() + 120
            while got < expected and time.monotonic() < deadline:
                got += len(consumer.poll(timeout=1.0))
        return got

    return timed(work)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--latency-samples", type=int, default=5000)
    args = parser.parse_args()
    produce, pull, p50s, p99s, sync_rates = [], [], [], [], []
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        try:
            namesrv = cluster.namesrv_addr
            for run in range(args.runs):
                topic = f"Bench{run}"
                with Admin(namesrv) as admin:
                    admin.create_topic(topic, 4, 4)
                rate, stored = produce_batches(namesrv, topic, args.messages, 128, 4)
                produce.append(rate)
                pull.append(consume(namesrv, topic, f"bench-cg-{run}", stored))
                p50, p99, rate = sync_latency(namesrv, f"Lat{run}", args.latency_samples)
                p50s.append(p50)
                p99s.append(p99)
                sync_rates.append(rate)
        finally:
            cluster.stop()
    report(
        "client throughput",
        [
            Figure("produce, send_batch 128 x 1 KB, 4 threads", "msg/s", produce),
            Figure("pull, PullConsumer.poll, 4 queues", "msg/s", pull),
            Figure("sync send 1 KB, one in flight", "msg/s", sync_rates),
            Figure("sync send latency p50", "µs", p50s),
            Figure("sync send latency p99", "µs", p99s),
        ],
    )


if __name__ == "__main__":
    main()
