"""Request/reply round trip: Producer.request against a PushConsumer that answers with reply().

    uv run python bench/request_reply.py [--runs 3] [--requests 3000] [--threads 1]

On a local cluster (launcher: name server and the whole broker group). Each round trip is a
request send (stored, stamped by the broker), its delivery to the replier by a long-polling
pull, the listener's reply() to the broker (handed to the requester's held poll, then stored)
and the requester's wake-up. --threads requesters call request() one after another each; the
figures are the latency of one request() (p50, p99) and the round trips per second.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

from common import Figure, percentile, report

from ferry.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from ferry.runtime.launcher import start_local_cluster

TOPIC = "BenchRequest"
BODY = b"x" * 256
WARM_UP = 200


def replier(namesrv: str) -> PushConsumer:
    consumer = PushConsumer(
        "bench-replier", namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET, consume_thread_nums=4
    )
    consumer.subscribe(TOPIC)

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        for msg in msgs:
            if "CORRELATION_ID" in msg.properties:  # not the message that made the topic
                consumer.reply(msg, msg.body)
        return ConsumeResult.SUCCESS

    consumer.register_listener(listener)
    consumer.start()
    return consumer


def one_run(producer: Producer, requests: int, threads: int) -> tuple[list[float], float]:
    """(latencies in ms, round trips per second)."""
    latencies: list[float] = []
    lock = threading.Lock()
    per_thread = requests // threads

    def work() -> None:
        mine: list[float] = []
        for _ in range(per_thread):
            started = time.perf_counter()
            reply = producer.request(Message(TOPIC, BODY), 10_000)
            mine.append((time.perf_counter() - started) * 1000)
            if reply.body != BODY:
                raise SystemExit("a reply with another body")
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    if len(latencies) != per_thread * threads:
        raise SystemExit("some requests failed")
    return latencies, len(latencies) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        try:
            with Producer("bench-requester", cluster.namesrv_addr) as producer:
                producer.send(Message(TOPIC, b"create the topic"))
                consumer = replier(cluster.namesrv_addr)
                try:
                    for _ in range(WARM_UP):  # the replier's queues assigned, polls held
                        producer.request(Message(TOPIC, BODY), 30_000)
                    p50, p99, rate = [], [], []
                    for _ in range(args.runs):
                        latencies, per_s = one_run(producer, args.requests, args.threads)
                        p50.append(percentile(latencies, 0.50))
                        p99.append(percentile(latencies, 0.99))
                        rate.append(per_s)
                finally:
                    consumer.shutdown()
        finally:
            cluster.stop()
    report(
        f"request reply {args.threads} thread(s)",
        [
            Figure("request() p50", "ms", p50),
            Figure("request() p99", "ms", p99),
            Figure("round trips", "req/s", rate),
        ],
    )


if __name__ == "__main__":
    main()
