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
import itertools
import tempfile
import threading
import time
from typing import Any

import zmq
from common import percentile
from e2e_paths import poll_latencies, stamped_body

from ferry.client import Admin, Message, Producer
from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import PullMessageReply, PullMessageRequest
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 1024


class RawPuller:
    """Pulls queue 0 of a topic over one DEALER, a thread waiting on each answer."""

    def __init__(self, addr: str, topic: str) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(addr if "://" in addr else f"tcp://{addr}")
        self.codec = RequestCodec()
        self.ids = itertools.count(1)
        self.topic = topic
        self.offset = 0

    def pull(self) -> tuple[int, int]:
        """Asks, waits for the answer; (count, ns at its arrival)."""
        body = PullMessageRequest(
            consumer_group="cg-raw",
            topic=self.topic,
            queue_id=0,
            queue_offset=self.offset,
            max_msgs=32,
            suspend_ms=15_000,
        )
        self.sock.send_multipart(self.codec.request_frames(RequestEnvelope(next(self.ids), body)))
        if not self.sock.poll(20_000):
            raise TimeoutError("no pull answer")
        frames = self.sock.recv_multipart()
        now = time.perf_counter_ns()
        env, _payload = self.codec.decode_reply(frames[1:] if not frames[0] else frames)
        reply = env.body
        assert isinstance(reply, PullMessageReply), reply
        self.offset = reply.next_begin_offset
        return reply.count, now

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


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
    puller = RawPuller(addr, topic)
    sends: list[float] = []
    legs: list[float] = []
    with Producer("bench-pull-leg", namesrv) as producer:
        producer.send(Message(topic, BODY))  # the route
        puller.offset = 1
        got: list[int] = []
        for _ in range(samples):
            got.clear()
            waiter = threading.Thread(target=lambda: got.append(puller.pull()[1]))
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
