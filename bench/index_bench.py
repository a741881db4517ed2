"""The index: build rate and query latency at 1M indexed keys, in-process and end to end.

    uv run python bench/index_bench.py [--runs 3] [--keys 1000000] [--cluster-messages 100000]
        [--chunk 128]

In-process (no sockets): builds an IndexStore from a CommitLog of records as the store writes
them (each with one KEYS value and a UNIQ_KEY: two keys per record), fed in chunks of 128
records as dispatch notices carry them (--chunk: the index merges the notices queued between
two drains, so under load it applies thousands at once), with RocketMQ's default geometry (5M
slots, 20M entries a file). Then times random key queries (max 32), unique-key queries, and a
key shared by 1,000 messages.

End to end: a local cluster (launcher), --cluster-messages sent with a key each, then
`queries.query_msg_by_key` timed through the SDK, remoting, the index and the store.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import tempfile
import time
from pathlib import Path

from common import Figure, percentile, report

from ferry.admin import Admin, queries
from ferry.client import Message, Producer
from ferry.index.index_store import Geometry, IndexStore
from ferry.index.keys import key_hash
from ferry.protocol import record
from ferry.protocol.messages import IndexStatusReply, IndexStatusRequest
from ferry.runtime.launcher import start_local_cluster
from ferry.runtime.service import Service

TOPIC = "BenchTopic"
CHUNK = 128  # records per dispatch notice (by default)
HOT_EVERY = 500  # one record in this many also carries the shared key
T0 = 1_700_000_000_000


def make_log(records: int, chunk: int = CHUNK) -> tuple[bytes, list[int]]:
    """The CommitLog bytes and the offsets where the chunks start."""
    parts: list[bytes] = []
    cuts: list[int] = []
    phys = 0
    for i in range(records):
        if i % chunk == 0:
            cuts.append(phys)
        keys = f"order-{i} hot" if i % HOT_EVERY == 0 else f"order-{i}"
        props = record.encode_properties(
            {record.PROPERTY_KEYS: keys, record.PROPERTY_UNIQ_KEY: f"{i:032X}"}
        )
        raw = bytearray(record.encode_record(TOPIC.encode(), b"x" * 64, props))
        record.OFFSETS.pack_into(raw, record.OFF_OFFSETS, i, phys)
        record.STORE_STAMP.pack_into(raw, record.OFF_STORE_STAMP, T0 + i // 100, bytes(8))
        parts.append(bytes(raw))
        phys += len(raw)
    cuts.append(phys)
    return b"".join(parts), cuts


def one_run(records: int, queries: int, log: bytes, cuts: list[int]) -> dict[str, float]:
    out: dict[str, float] = {}
    view = memoryview(log)
    with tempfile.TemporaryDirectory() as root:
        index = IndexStore.open(Path(root), Geometry(5_000_000, 20_000_000))
        try:
            collected = [0.0, 0.0]  # seconds in the cyclic collector, start of the current pass

            def on_gc(phase: str, _info: dict[str, int]) -> None:
                now = time.perf_counter()
                if phase == "start":
                    collected[1] = now
                else:
                    collected[0] += now - collected[1]

            gc.callbacks.append(on_gc)
            try:
                started = time.perf_counter()
                keys = 0
                for a, b in itertools.pairwise(cuts):
                    keys += index.apply(view[a:b], b)
                out["build"] = keys / (time.perf_counter() - started)
            finally:
                gc.callbacks.remove(on_gc)
            out["collector"] = collected[0] * 1000

            rng = random.Random(7)
            samples: list[float] = []
            for _ in range(queries):
                i = rng.randrange(records)
                key = f"order-{i}"
                t = time.perf_counter()
                hits = index.query(key_hash(TOPIC, key), 0, 1 << 62, 32)
                samples.append((time.perf_counter() - t) * 1e9)
                assert len(hits) == 1
            out["key p50"], out["key p99"] = percentile(samples, 0.5), percentile(samples, 0.99)

            samples = []
            for _ in range(queries):
                i = rng.randrange(records)
                key = f"{i:032X}"
                t = time.perf_counter()
                index.query(key_hash(TOPIC, key, unique=True), 0, 1 << 62, 32)
                samples.append((time.perf_counter() - t) * 1e9)
            out["unique p50"], out["unique p99"] = (
                percentile(samples, 0.5),
                percentile(samples, 0.99),
            )

            samples = []
            for _ in range(max(queries // 10, 10)):
                t = time.perf_counter()
                hits = index.query(key_hash(TOPIC, "hot"), 0, 1 << 62, 32)
                samples.append((time.perf_counter() - t) * 1e9)
                assert len(hits) == min(32, -(-records // HOT_EVERY))
            out["hot p50"], out["hot p99"] = percentile(samples, 0.5), percentile(samples, 0.99)
        finally:
            index.close(sync=False)
    return out


def index_status(endpoint: str) -> IndexStatusReply:
    """One status request to the index, over a throwaway loop (the bench has no client)."""
    service = Service("bench")
    peer = service.connect_peer(endpoint)
    got: list[IndexStatusReply] = []

    def on_reply(body: object, _frames: list[object]) -> None:
        if isinstance(body, IndexStatusReply):
            got.append(body)
        service.stop()

    peer.request(IndexStatusRequest(), on_reply, timeout_s=5)
    service.run(handle_signals=False)
    if not got:
        raise RuntimeError("the index did not answer its status")
    return got[0]


def cluster_run(messages: int, queries_n: int) -> dict[str, float]:
    """Query latency through the SDK, remoting, the index and the store."""
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        try:
            namesrv = cluster.namesrv_addr
            with Admin(namesrv) as admin:
                admin.create_topic(TOPIC, 4, 4)
            with Producer("bench-index", namesrv) as producer:
                for start in range(0, messages, 128):
                    producer.send_batch(
                        [
                            Message(TOPIC, b"x" * 64, keys=[f"order-{i}"])
                            for i in range(start, start + 128)
                        ]
                    )
            endpoint = cluster.get("index").endpoints["endpoint"]
            deadline = time.monotonic() + 300
            while index_status(endpoint).entries < messages * 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("the index did not catch up in 300 s")
                time.sleep(0.2)
            rng = random.Random(11)
            samples: list[float] = []
            with Admin(namesrv) as admin:
                for _ in range(queries_n):
                    key = f"order-{rng.randrange(messages)}"
                    t = time.perf_counter()
                    found = queries.query_msg_by_key(admin, TOPIC, key)
                    samples.append((time.perf_counter() - t) * 1e6)
                    assert len(found) == 1
            return {"e2e p50": percentile(samples, 0.5), "e2e p99": percentile(samples, 0.99)}
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keys", type=int, default=1_000_000, help="indexed keys (2 a record)")
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--cluster-messages", type=int, default=100_000, help="0: skip")
    parser.add_argument("--cluster-queries", type=int, default=2_000)
    parser.add_argument("--chunk", type=int, default=CHUNK, help="records per IndexStore.apply")
    args = parser.parse_args()
    records = args.keys // 2
    log, cuts = make_log(records, args.chunk)
    runs = [one_run(records, args.queries, log, cuts) for _ in range(args.runs)]

    if args.cluster_messages:
        for run, e2e in zip(
            runs,
            (cluster_run(args.cluster_messages, args.cluster_queries) for _ in runs),
            strict=True,
        ):
            run.update(e2e)

    def fig(name: str, key: str, unit: str) -> Figure:
        return Figure(name, unit, [r[key] for r in runs])

    n = f"{records * 2 + records // HOT_EVERY:,} keys"
    report(
        "index",
        [
            fig(f"build, IndexStore.apply, {n}, chunks of {args.chunk}", "build", "keys/s"),
            fig("build: time in the cyclic collector", "collector", "ms"),
            fig("query by key, max 32, p50", "key p50", "ns"),
            fig("query by key, max 32, p99", "key p99", "ns"),
            fig("query by unique key, p50", "unique p50", "ns"),
            fig("query by unique key, p99", "unique p99", "ns"),
            fig(f"query of a key on {records // HOT_EVERY} messages, max 32, p50", "hot p50", "ns"),
            fig(f"query of a key on {records // HOT_EVERY} messages, max 32, p99", "hot p99", "ns"),
        ]
        + (
            [
                fig(f"QUERY_MESSAGE through the SDK, {m:,} messages, p50", "e2e p50", "µs"),
                fig(f"QUERY_MESSAGE through the SDK, {m:,} messages, p99", "e2e p99", "µs"),
            ]
            if (m := args.cluster_messages)
            else []
        ),
    )


if __name__ == "__main__":
    main()
