"""Redis 7 Streams from redis-py (with hiredis): XADD pipelined 1,000 per round trip, XREADGROUP
COUNT 1000 with the previous batch's XACK in the same round trip, AOF on (everysec or always,
switched with CONFIG SET)."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from peers.workload import BODY, PIPELINE, STAMP, Latency, Pacer, percentiles

GROUP = "bench"


class RedisSide:
    def __init__(self, port: int, appendfsync: str) -> None:
        """Every call first sets `appendfsync` (two variants share one server)."""
        self.port = port
        self.appendfsync = appendfsync
        self.client = redis.Redis(port=port)

    def close(self) -> None:
        self.client.close()

    def _durability(self) -> None:
        self.client.config_set("appendfsync", self.appendfsync)

    def produce(self, stream: str, count: int) -> float:
        """Pipelined XADD, 1,000 commands per round trip; msg/s."""
        self._durability()
        started = time.perf_counter()
        pipe = self.client.pipeline(transaction=False)
        sent = 0
        while sent < count:
            n = min(PIPELINE, count - sent)
            for _ in range(n):
                pipe.xadd(stream, {"b": BODY})
            pipe.execute()
            sent += n
        return count / (time.perf_counter() - started)

    def consume(self, stream: str, count: int) -> float:
        """A consumer group from the start: XREADGROUP COUNT 1000, acks pipelined with the
        next read; msg/s until the last ack is in."""
        self._durability()
        self.client.xgroup_create(stream, GROUP, id="0")
        started = time.perf_counter()
        got = 0
        pending: list[Any] = []
        pipe = self.client.pipeline(transaction=False)
        while got < count:
            if pending:
                pipe.xack(stream, GROUP, *pending)
            pipe.xreadgroup(GROUP, "c1", {stream: ">"}, count=PIPELINE, block=1000)
            replies = pipe.execute()
            batch = replies[-1][0][1] if replies[-1] else []
            pending = [entry_id for entry_id, _ in batch]
            got += len(batch)
        if pending:
            self.client.xack(stream, GROUP, *pending)
        return got / (time.perf_counter() - started)

    def sync_latency(self, stream: str, samples: int) -> Latency:
        """One XADD at a time (it returns once the AOF policy is satisfied)."""
        self._durability()
        for _ in range(200):
            self.client.xadd(stream, {"b": BODY})
        took = []
        for _ in range(samples):
            started = time.perf_counter()
            self.client.xadd(stream, {"b": BODY})
            took.append((time.perf_counter() - started) * 1e6)
        return percentiles(took)

    def end_to_end(self, stream: str, rate: int, seconds: float) -> Latency:
        """XADD at a steady rate from this thread; a consumer thread on its own connection
        blocks in XREADGROUP and acks each batch; latency from before XADD to the read."""
        self._durability()
        self.client.xgroup_create(stream, GROUP, id="$", mkstream=True)
        total = int(rate * seconds)
        samples: list[float] = []
        stop = threading.Event()

        def consumer() -> None:
            conn = redis.Redis(port=self.port)
            try:
                while not stop.is_set():
                    reply = conn.xreadgroup(GROUP, "c1", {stream: ">"}, count=PIPELINE, block=200)
                    if not reply:
                        continue
                    now = time.perf_counter_ns()
                    batch = reply[0][1]
                    samples.extend(
                        (now - STAMP.unpack_from(fields[b"b"])[0]) / 1000 for _, fields in batch
                    )
                    conn.xack(stream, GROUP, *[entry_id for entry_id, _ in batch])
            finally:
                conn.close()

        thread = threading.Thread(target=consumer, daemon=True)
        thread.start()
        try:
            pacer = Pacer(total, rate)
            for stamp in pacer:
                self.client.xadd(stream, {"b": stamp})
            deadline = time.monotonic() + 30
            while len(samples) < total and time.monotonic() < deadline:
                time.sleep(0.02)  # the last deliveries, bounded
        finally:
            stop.set()
            thread.join(5)
        return pacer.result(samples)
