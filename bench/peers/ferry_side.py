"""Ferry through its SDK on a local cluster started by the launcher (`ferry dev up`'s path):
the same calls as bench/client_throughput.py and bench/push_consumer.py, so the figures of
those scripts and of this comparison mean the same thing."""

from __future__ import annotations

import threading
import time

import client_throughput
import push_consumer

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from peers.workload import BODY, Latency, percentiles, settle

BATCH = (
    256  # messages per send_batch (one request, one frame): 4 x 256 in flight, ~the peers' 1,000
)
THREADS = 4  # producer threads, each with one batch in flight
QUEUES = 4


def start_ferry(data_dir: str, flush: str) -> LocalCluster:
    return start_local_cluster(data_dir, overrides={"flushDiskType": flush})


class FerrySide:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.namesrv = cluster.namesrv_addr
        self.stored: dict[str, int] = {}

    def close(self) -> None:
        pass

    def _topic(self, topic: str) -> None:
        with Admin(self.namesrv) as admin:
            admin.create_topic(topic, QUEUES, QUEUES)

    def produce(self, topic: str, count: int) -> float:
        """send_batch of 256 from 4 threads (one batch in flight each)."""
        self._topic(topic)
        rate, stored = client_throughput.produce_batches(self.namesrv, topic, count, BATCH, THREADS)
        self.stored[topic] = stored
        return rate

    def consume(self, topic: str, count: int) -> float:
        """PullConsumer.poll (pulls of 512) from the first offset; the offsets are committed
        when the consumer shuts down, inside the timed part."""
        expected = self.stored.get(topic, count)
        return client_throughput.consume(self.namesrv, topic, f"cg-{topic}", expected)

    def send_async(self, topic: str, count: int) -> float:
        """`count` single-message send_async calls (the SDK batches them), until every Future
        has its result."""
        self._topic(topic)
        with Producer("bench-async", self.namesrv, send_timeout_ms=30_000) as producer:
            producer.send(Message(topic, BODY))  # the route, before timing
            started = time.perf_counter()
            futures = [producer.send_async(Message(topic, BODY)) for _ in range(count)]
            for fut in futures:  # in order: as_completed costs ~8 µs a future, result() ~2
                fut.result(timeout=300)
            return count / (time.perf_counter() - started)

    def sync_latency(self, topic: str, samples: int) -> Latency:
        self._topic(topic)
        p50, p99, _ = client_throughput.sync_latency(self.namesrv, topic, samples)
        return Latency(p50, p99)

    def end_to_end(self, topic: str, rate: int, seconds: float) -> Latency:
        """send_async at a steady rate to a PushConsumer's listener (RocketMQ's defaults)."""
        self._topic(topic)
        return percentiles(push_consumer.latency(self.namesrv, topic, f"cg-{topic}", rate, seconds))

    def spread_topics(self, prefix: str, topics: int, count: int) -> float:
        """Batched produce as `produce`, each batch to the next of `topics` topics (created,
        routed and every queue written once before timing: 100k messages over 4,000 queues
        would otherwise time the creation of each queue's files, not many topics; that cost is
        measured apart, docs/perf-notes/2026-11-22-many-topics.md)."""
        names = [f"{prefix}-{i}" for i in range(topics)]
        with Admin(self.namesrv) as admin:
            for name in names:
                admin.create_topic(name, QUEUES, QUEUES)
        per_thread = max(1, count // THREADS // BATCH)
        with Producer("bench-topics", self.namesrv) as producer:
            for name in names:
                for _ in range(QUEUES):  # round robin: one send per queue
                    producer.send(Message(name, BODY))
            settle(window_s=1.5)  # longer than flushIntervalConsumeQueue: the new files' flush
            batches = [[Message(name, BODY) for _ in range(BATCH)] for name in names]

            def loop(first: int) -> None:
                for i in range(per_thread):
                    producer.send_batch(batches[(first + i * THREADS) % topics])

            pool = [threading.Thread(target=loop, args=(t,)) for t in range(THREADS)]
            started = time.perf_counter()
            for t in pool:
                t.start()
            for t in pool:
                t.join()
            return per_thread * THREADS * BATCH / (time.perf_counter() - started)
