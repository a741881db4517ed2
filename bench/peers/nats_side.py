"""NATS JetStream from nats-py: a file-stored stream with one replica per workload;
publish_async with 1,000 pending, a durable pull consumer fetching 500 and acking each."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats
from common import schedule
from nats.js.api import StorageType

from peers.workload import BODY, PIPELINE, STAMP, Latency, percentiles, stamped

FETCH = 500
T = TypeVar("T")


class NatsSide:
    def __init__(self, port: int) -> None:
        self.url = f"nats://127.0.0.1:{port}"

    def close(self) -> None:
        pass

    def _run(self, fn: Callable[[Any, Any], Awaitable[T]], stream: str) -> T:
        async def main() -> T:
            nc = await nats.connect(self.url)
            try:
                js = nc.jetstream(publish_async_max_pending=PIPELINE)
                await js.add_stream(
                    name=stream, subjects=[stream], storage=StorageType.FILE, num_replicas=1
                )
                return await fn(nc, js)
            finally:
                await nc.close()

        return asyncio.run(main())

    def produce(self, stream: str, count: int) -> float:
        async def work(_nc: Any, js: Any) -> float:
            started = time.perf_counter()
            for _ in range(count):
                await js.publish_async(stream, BODY)
            await js.publish_async_completed()
            rate = count / (time.perf_counter() - started)
            stored = (await js.stream_info(stream)).state.messages
            if stored != count:
                raise RuntimeError(f"JetStream stored {stored} of {count}")
            return rate

        return self._run(work, stream)

    def consume(self, stream: str, count: int) -> float:
        """Reads the stream `produce` filled (add_stream on an existing one is a no-op)."""

        async def work(nc: Any, js: Any) -> float:
            sub = await js.pull_subscribe(stream, durable="bench", stream=stream)
            started = time.perf_counter()
            got = 0
            while got < count:
                msgs = await sub.fetch(FETCH, timeout=5)
                for msg in msgs:
                    await msg.ack()
                got += len(msgs)
            await nc.flush()  # the acks are out
            return got / (time.perf_counter() - started)

        return self._run(work, stream)

    def sync_latency(self, stream: str, samples: int) -> Latency:
        async def work(_nc: Any, js: Any) -> Latency:
            for _ in range(200):
                await js.publish(stream, BODY)
            took = []
            for _ in range(samples):
                started = time.perf_counter()
                await js.publish(stream, BODY)
                took.append((time.perf_counter() - started) * 1e6)
            return percentiles(took)

        return self._run(work, stream)

    def end_to_end(self, stream: str, rate: int, seconds: float) -> Latency:
        """A push consumer (manual acks) and a publisher waiting for each PubAck, at a steady
        rate on one event loop; latency from before publish to the callback."""

        async def work(_nc: Any, js: Any) -> Latency:
            samples: list[float] = []

            async def on_msg(msg: Any) -> None:
                samples.append((time.perf_counter_ns() - STAMP.unpack_from(msg.data)[0]) / 1000)
                await msg.ack()

            sub = await js.subscribe(stream, durable="e2e", cb=on_msg, manual_ack=True)
            total = 0
            start = time.perf_counter()
            for ahead in schedule(rate, seconds):
                if ahead > 0:
                    await asyncio.sleep(ahead)
                await js.publish(stream, stamped())
                total += 1
            sent_rate = total / (time.perf_counter() - start)
            deadline = time.monotonic() + 30
            while len(samples) < total and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            await sub.unsubscribe()
            p50, p99, _ = percentiles(samples)
            return Latency(p50, p99, sent_rate)

        return self._run(work, stream)
