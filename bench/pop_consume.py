"""Pop consumption (SimpleConsumer receive + ack) against PullConsumer, on one local cluster.

    uv run python bench/pop_consume.py [--runs 3] [--messages 20000] [--threads 4] [--batch 32]

A topic of 4 queues is filled with 1 KB messages once per run; then, alternating in each
run, a fresh PullConsumer group reads them all (poll, offsets committed automatically) and
three fresh SimpleConsumer groups receive and ack them all (`--threads` threads sharing one
SimpleConsumer, receive(--batch), then: ack() per message one after the other; ack_async()
for the whole batch, then wait (RocketMQ's ackAsync); or one ack_batch() of the batch
(RocketMQ's BATCH_ACK_MESSAGE).
Pop's rate counts acked messages; a pop round ends when every message is acked.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

from client_throughput import BODY, consume
from common import Figure, report, timed

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, Producer, SimpleConsumer
from ferry.runtime.launcher import start_local_cluster

TOPIC = "BenchPop"
QUEUES = 4
MODES = ("ack", "ack_async", "ack_batch")


def fill(namesrv: str, topic: str, messages: int) -> None:
    with Producer("bench-pop-producer", namesrv) as producer:
        batch = [Message(topic, BODY) for _ in range(128)]
        for _ in range(messages // 128):
            producer.send_batch(batch)


def pop_and_ack(
    namesrv: str, topic: str, group: str, expected: int, threads: int, batch: int, mode: str
) -> float:
    acked = 0
    lock = threading.Lock()

    def work() -> int:
        with SimpleConsumer(
            group,
            namesrv,
            {topic: "*"},
            await_duration=1.0,
            invisible_duration=60.0,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
        ) as consumer:
            deadline = time.monotonic() + 300

            def loop() -> None:
                nonlocal acked
                while time.monotonic() < deadline:
                    with lock:
                        if acked >= expected:
                            return
                    msgs = consumer.receive(batch)
                    if mode == "ack_batch":
                        if any(consumer.ack_batch(msgs)):
                            raise RuntimeError("an ack of the batch failed")
                    elif mode == "ack_async":
                        for future in [consumer.ack_async(m) for m in msgs]:
                            future.result()
                    else:
                        for msg in msgs:
                            consumer.ack(msg)
                    with lock:
                        acked += len(msgs)

            pool = [threading.Thread(target=loop) for _ in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
        if acked < expected:
            raise RuntimeError(f"acked {acked} of {expected} from {topic}")
        return acked

    return timed(work)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    messages = args.messages // 128 * 128
    pull_rates: list[float] = []
    pop_rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        try:
            namesrv = cluster.namesrv_addr
            with Admin(namesrv) as admin:
                admin.create_topic(TOPIC, QUEUES, QUEUES)
            for run in range(args.runs):
                topic = f"{TOPIC}{run}"
                with Admin(namesrv) as admin:
                    admin.create_topic(topic, QUEUES, QUEUES)
                fill(namesrv, topic, messages)
                pull_rates.append(consume(namesrv, topic, f"bench-pull-{run}", messages))
                for mode, rates in pop_rates.items():
                    group = f"bench-pop-{run}-{mode}"
                    rates.append(
                        pop_and_ack(namesrv, topic, group, messages, args.threads, args.batch, mode)
                    )
                print(
                    f"run {run}: pull {pull_rates[-1]:,.0f} msg/s, "
                    + ", ".join(f"pop+{m} {r[-1]:,.0f}" for m, r in pop_rates.items())
                )
        finally:
            cluster.stop()
    report(
        f"pop consume {args.threads} threads batch {args.batch}",
        [
            Figure("PullConsumer poll", "msg/s", pull_rates),
            *(Figure(f"SimpleConsumer receive+{m}", "msg/s", r) for m, r in pop_rates.items()),
            Figure(
                "pop (ack_batch) / pull",
                "%",
                [100 * p / q for p, q in zip(pop_rates["ack_batch"], pull_rates, strict=True)],
            ),
        ],
    )


if __name__ == "__main__":
    main()
