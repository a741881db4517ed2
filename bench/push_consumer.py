"""Push consumer throughput and end-to-end latency, on a local cluster.

    uv run python bench/push_consumer.py [--runs 3] [--messages 50000] [--rate 2000]

Measures, with 1 KB bodies: how fast a PushConsumer (20 consume threads, batches of 1, as
RocketMQ's defaults) drains a backlog of `--messages`, and the latency from send_async() to
the listener at a steady `--rate` msg/s (p50/p99, producer and consumer in this process).
"""

from __future__ import annotations

import argparse
import struct
import tempfile
import threading
import time

from common import Figure, paced, percentile, report

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 1024
STAMP = struct.Struct(">q")
STALL_US = 50_000  # a delivery this late is reported with its queue and time


def drain_rate(namesrv: str, topic: str, group: str, count: int) -> float:
    """Produces `count` messages first, then times a push consumer reading them all."""
    with Producer("bench-push-fill", namesrv) as producer:
        batch = [Message(topic, BODY) for _ in range(128)]
        for _ in range(count // 128):
            producer.send_batch(batch)
    total = count // 128 * 128
    done = threading.Event()
    seen = [0]
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        with lock:
            seen[0] += len(msgs)
            if seen[0] >= total:
                done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    started = time.perf_counter()
    with consumer:
        done.wait(300)
        took = time.perf_counter() - started
    return seen[0] / took


def latency(namesrv: str, topic: str, group: str, rate: int, seconds: float) -> list[float]:
    """Microseconds from send_async() to the listener, at a steady rate."""
    samples: list[float] = []
    late: list[tuple[int, int, float]] = []  # (queue id, sent ns, µs) of deliveries past STALL_US
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        now = time.perf_counter_ns()
        with lock:
            for m in msgs:
                sent = STAMP.unpack_from(m.body)[0]
                took = (now - sent) / 1000
                samples.append(took)
                if took > STALL_US:
                    late.append((m.queue.queue_id, sent, took))
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, namesrv)
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    with consumer, Producer("bench-push-latency", namesrv) as producer, Admin(namesrv) as admin:
        queues = admin.queues(topic)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not all(
            admin.consumer_offset(group, q) is not None for q in queues
        ):
            time.sleep(0.05)  # wait-ok: the consumer's start offsets, before timing anything
        began = time.perf_counter_ns()
        total = paced(
            rate,
            seconds,
            lambda: producer.send_async(
                Message(topic, STAMP.pack(time.perf_counter_ns()) + BODY[8:])
            ),
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if len(samples) >= total:
                    break
            time.sleep(0.05)  # wait-ok: the last deliveries
    with lock:
        if late:
            report_stalls(late, began)
        return list(samples)


def report_stalls(late: list[tuple[int, int, float]], began_ns: int) -> None:
    """Prints where deliveries past STALL_US were (which queues, when, how late): the
    clue to a tail that one round has and the next has not."""
    by_queue: dict[int, list[tuple[int, float]]] = {}
    for queue_id, sent, took in late:
        by_queue.setdefault(queue_id, []).append((sent, took))
    for queue_id, rows in sorted(by_queue.items()):
        sents = [(sent - began_ns) / 1e9 for sent, _ in rows]
        worst = max(took for _, took in rows) / 1000
        print(
            f"   e2e stall: queue {queue_id}: {len(rows)} deliveries over "
            f"{STALL_US / 1000:.0f} ms (worst {worst:.0f} ms), sent {min(sents):.2f}-"
            f"{max(sents):.2f} s into the run",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    drains, p50s, p99s = [], [], []
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        try:
            namesrv = cluster.namesrv_addr
            for run in range(args.runs):
                with Admin(namesrv) as admin:
                    admin.create_topic(f"PushDrain{run}", 4, 4)
                    admin.create_topic(f"PushLatency{run}", 4, 4)
                drains.append(
                    drain_rate(namesrv, f"PushDrain{run}", f"bench-drain-{run}", args.messages)
                )
                samples = latency(
                    namesrv, f"PushLatency{run}", f"bench-lat-{run}", args.rate, args.seconds
                )
                p50s.append(percentile(samples, 0.5))
                p99s.append(percentile(samples, 0.99))
        finally:
            cluster.stop()
    report(
        "push consumer",
        [
            Figure("push consumer drain, 1 KB, 4 queues, 20 threads", "msg/s", drains),
            Figure(f"end-to-end latency p50 at {args.rate} msg/s", "µs", p50s),
            Figure(f"end-to-end latency p99 at {args.rate} msg/s", "µs", p99s),
        ],
    )


if __name__ == "__main__":
    main()
