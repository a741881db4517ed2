"""The held pull's way back, without the SDK's consumer: one raw pull held at the broker,
then one sync send; how long after the send began the pull's answer arrives.

    uv run --frozen --all-packages --group bench python bench/pull_leg.py [--samples 500]

Prints p50/p99 in µs, sends paced 3 ms apart: sync sends alone; sync sends while a raw pull
(one DEALER, no SDK consumer) is held; that pull's answer, from its send's start; and the same
sends taken by PullConsumer.poll (the SDK's I/O thread, its sink and the caller's wake-up).
The broker's share of the way back is the third line less the second, the SDK's the fourth
less the third.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

from common import percentile
from e2e_paths import poll_latencies, stamped_body
from store_cpu import Probe

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.protocol.messages import PullMessageReply, PullMessageRequest
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 1024


def sends_alone(namesrv: str, topic: str, samples: int) -> list[float]:
    """Sync sends paced as raw_leg paces them, no pull held: the baseline."""
    took: list[float] = []
    with Producer("bench-pull-leg-alone", namesrv) as producer:
        producer.send(Message(topic, BODY))  # the route
        for _ in range(samples):
            time.sleep(0.003)  # wait-ok: the same pacing as raw_leg
            t0 = time.perf_counter_ns()
            producer.send(Message(topic, BODY))
            took.append((time.perf_counter_ns() - t0) / 1000)
    return took


def raw_leg(addr: str, namesrv: str, topic: str, samples: int) -> tuple[list[float], list[float]]:
    """Sync sends, each while a pull of queue 0 is held from a raw DEALER: (send µs, µs from
    the send's start to the pull's answer)."""
    puller = Probe(f"tcp://{addr}")
    sends: list[float] = []
    legs: list[float] = []
    offset = 1  # past the route's message
    got: list[int] = []

    def pull() -> None:
        nonlocal offset
        reply = puller.call(
            PullMessageRequest(
                consumer_group="cg-raw",
                topic=topic,
                queue_id=0,
                queue_offset=offset,
                max_msgs=32,
                suspend_ms=15_000,
            )
        )
        got.append(time.perf_counter_ns())
        assert isinstance(reply, PullMessageReply), reply
        offset = reply.next_begin_offset

    with Producer("bench-pull-leg", namesrv) as producer:
        producer.send(Message(topic, BODY))  # the route
        for _ in range(samples):
            got.clear()
            waiter = threading.Thread(target=pull)
            waiter.start()
            time.sleep(0.003)  # wait-ok: the pull reaches the store and is held
            t0 = time.perf_counter_ns()
            producer.send(Message(topic, BODY))
            t1 = time.perf_counter_ns()
            waiter.join()
            sends.append((t1 - t0) / 1000)
            legs.append((got[0] - t0) / 1000)
    puller.close()
    return sends, legs


def sdk_leg(namesrv: str, topic: str, samples: int) -> list[float]:
    """The same sends, taken by PullConsumer.poll in a thread: µs from each send's start."""

    def send_all(producer: Producer) -> int:
        for _ in range(samples + 1):
            time.sleep(0.003)  # wait-ok: the same pacing as raw_leg
            producer.send(Message(topic, stamped_body()))
        return samples + 1

    return poll_latencies(namesrv, topic, "cg-pull-leg", send_all)[1:]  # [0]: the route's


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        try:
            with Admin(cluster.namesrv_addr) as admin:
                admin.create_topic("PullLeg", 1, 1)
                admin.create_topic("PullLegAlone", 1, 1)
                admin.create_topic("PullLegSdk", 1, 1)
            sdk = sdk_leg(cluster.namesrv_addr, "PullLegSdk", args.samples)
            alone = sends_alone(cluster.namesrv_addr, "PullLegAlone", args.samples)
            sends, legs = raw_leg(
                cluster.broker_addr, cluster.namesrv_addr, "PullLeg", args.samples
            )
        finally:
            cluster.stop()
    for name, xs in (
        ("sync send alone", alone),
        ("sync send, a pull held", sends),
        ("raw held pull answered", legs),
        ("PullConsumer.poll returned", sdk),
    ):
        print(f"{name:28} p50 {percentile(xs, 0.5):7.0f}  p99 {percentile(xs, 0.99):7.0f} µs")


if __name__ == "__main__":
    main()
