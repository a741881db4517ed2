"""HA replication on a local master group and slave group (real processes).

    uv run python bench/ha_replication.py [--runs 3] [--messages 100000] [--seconds 5]

Measures, with 1 KB bodies:
- in-process (no sockets): the master's put (MessageStore.put, batches of 128) against the
  slave's work for the same records (read_raw on the master + append_raw on the slave, 1 MiB
  transfers): what replication costs per message next to storing it;
- produce throughput (send_batch of 128, 4 threads) and sync send latency p50/p99 (one in
  flight) under ASYNC_MASTER and SYNC_MASTER, i.e. what waiting for the slave's ack costs;
- replication throughput: log bytes per second the slave applies while the producer runs
  flat out (ASYNC_MASTER), from the first send until the slave holds the last byte;
- replication lag at sustained produce rates (ASYNC_MASTER): the master's and the slave's
  log ends sampled every 5 ms; lag in bytes (master end - slave end) and in ms (how long after
  the master reached an offset the slave reached it), p50/p99/max.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import zmq
from client_throughput import produce_batches, sync_latency
from common import Figure, percentile, report

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import StoreStatusReply, StoreStatusRequest
from ferry.protocol.record import encode_properties, encode_record
from ferry.runtime.config import BrokerConfig
from ferry.runtime.launcher import LocalCluster, add_slave_group, start_local_cluster
from ferry.store import replica
from ferry.store.store import MessageStore

BODY = b"x" * 1024
SAMPLE_S = 0.005


class LogEnd:
    """Asks a store for its log end over a DEALER (what a status page would do)."""

    def __init__(self, endpoint: str) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.codec = RequestCodec()
        self.ids = itertools.count(1)

    def __call__(self) -> int:
        self.sock.send_multipart(
            self.codec.request_frames(RequestEnvelope(next(self.ids), StoreStatusRequest()))
        )
        if not self.sock.poll(5000):
            raise TimeoutError("store status")
        env, _ = self.codec.decode_reply(self.sock.recv_multipart()[1:])
        assert isinstance(env.body, StoreStatusReply)
        return env.body.max_offset

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


def in_process(messages: int) -> tuple[float, float]:
    """(put msg/s, replicate msg/s) on fresh stores in a temp dir."""
    one = encode_record(b"HaBench", BODY, encode_properties({"TAGS": "A", "UNIQ_KEY": "K"}))
    batch = one * 128
    with tempfile.TemporaryDirectory() as data:
        size = 256 * 1024 * 1024
        master = MessageStore.open(
            BrokerConfig(store_path_root_dir=f"{data}/m", mapped_file_size_commit_log=size)
        )
        slave = MessageStore.open(
            BrokerConfig(
                store_path_root_dir=f"{data}/s",
                mapped_file_size_commit_log=size,
                broker_role="SLAVE",
                broker_id=1,
            )
        )
        try:
            rounds = max(1, messages // 128)
            started = time.perf_counter()
            for i in range(rounds):
                master.put("HaBench", i % 4, 128, batch)
            put_rate = rounds * 128 / (time.perf_counter() - started)
            started = time.perf_counter()
            while slave.log.end < master.log.end:
                got = replica.read_raw(master.log, slave.log.end, 1024 * 1024)
                replica.append_raw(slave, got.from_offset, got.data)
            return put_rate, rounds * 128 / (time.perf_counter() - started)
        finally:
            slave.close()
            master.close()


def start_pair(data: str, role: str) -> tuple[LocalCluster, LocalCluster]:
    overrides = {"brokerRole": role}
    master = start_local_cluster(data, overrides=overrides)
    try:
        slave = add_slave_group(master, str(Path(data) / "broker-a-s"), overrides=overrides)
    except BaseException:
        master.stop()
        raise
    return master, slave


def wait_caught_up(master_end: LogEnd, slave_end: LogEnd, timeout: float = 120.0) -> float:
    """Waits until the slave's log ends where the master's does; returns when (monotonic)."""
    deadline = time.monotonic() + timeout
    target = master_end()
    while slave_end() < target:
        if time.monotonic() > deadline:
            raise TimeoutError("the slave did not catch up")
        time.sleep(0.001)  # polling the end of a deadline-bounded wait
    return time.monotonic()


def replication_throughput(
    namesrv: str, master_end: LogEnd, slave_end: LogEnd, topic: str, messages: int
) -> float:
    """Bytes/s applied by the slave while a producer sends flat out."""
    start_bytes = master_end()
    started = time.monotonic()
    produce_batches(namesrv, topic, messages, 128, 4)
    done = wait_caught_up(master_end, slave_end)
    return (master_end() - start_bytes) / (done - started)


def sustained_lag(
    namesrv: str, master_end: LogEnd, slave_end: LogEnd, topic: str, rate: int, seconds: float
) -> tuple[list[float], list[float]]:
    """(lag bytes, lag ms) samples while a producer sends `rate` msg/s in batches of 32."""
    stop = threading.Event()
    batch = 32
    period = batch / rate

    def produce() -> None:
        with Producer("bench-ha-rate", namesrv) as producer:
            msgs = [Message(topic, BODY) for _ in range(batch)]
            next_at = time.monotonic()
            while not stop.is_set():
                producer.send_batch(msgs)
                next_at += period
                pause = next_at - time.monotonic()
                if pause > 0:
                    time.sleep(pause)  # pacing the producer to the target rate

    thread = threading.Thread(target=produce)
    thread.start()
    masters: list[tuple[float, int]] = []
    slaves: list[tuple[float, int]] = []
    lag_bytes: list[float] = []
    end_at = time.monotonic() + seconds
    while time.monotonic() < end_at:
        m = master_end()
        t = time.monotonic()
        s = slave_end()
        masters.append((t, m))
        slaves.append((time.monotonic(), s))
        lag_bytes.append(max(0, m - s))
        time.sleep(SAMPLE_S)  # the sampling period
    stop.set()
    thread.join()
    wait_caught_up(master_end, slave_end)
    # lag ms: for each master sample, how long until a slave sample reached its offset
    slave_times = [t for t, _ in slaves]
    slave_ends = [e for _, e in slaves]
    lag_ms: list[float] = []
    for t, m in masters:
        i = bisect.bisect_left(slave_times, t)
        while i < len(slave_ends) and slave_ends[i] < m:
            i += 1
        if i < len(slave_ends):
            lag_ms.append(max(0.0, (slave_times[i] - t) * 1000))
    return lag_bytes, lag_ms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--latency-samples", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rates", default="2000,10000")
    args = parser.parse_args()
    figures: list[Figure] = []
    rates = [int(r) for r in args.rates.split(",")]
    puts, copies = [], []
    for _ in range(args.runs):
        put_rate, copy_rate = in_process(args.messages)
        puts.append(put_rate)
        copies.append(copy_rate)
    figures += [
        Figure("in-process: MessageStore.put, batch 128 x 1 KB", "msg/s", puts),
        Figure("in-process: read_raw + append_raw, 1 MiB transfers", "msg/s", copies),
    ]
    roles = ("ASYNC_MASTER", "SYNC_MASTER")
    produce: dict[str, list[float]] = {r: [] for r in roles}
    p50s: dict[str, list[float]] = {r: [] for r in roles}
    p99s: dict[str, list[float]] = {r: [] for r in roles}
    repl: list[float] = []
    lag: dict[int, tuple[list[float], list[float], list[float], list[float]]] = {
        r: ([], [], [], []) for r in rates
    }
    # both pairs run side by side and each run measures one role right after the other, so
    # that a change of load on this shared machine hits both alike
    with tempfile.TemporaryDirectory() as data:
        pairs = {role: start_pair(f"{data}/{role}", role) for role in roles}
        ends = {
            role: (LogEnd(m.store_endpoint), LogEnd(s.store_endpoint))
            for role, (m, s) in pairs.items()
        }
        try:
            for run in range(args.runs):
                for role in roles:
                    namesrv = pairs[role][0].namesrv_addr
                    topic = f"HaBench{run}"
                    with Admin(namesrv) as admin:
                        admin.create_topic(topic, 4, 4)
                    started = time.perf_counter()
                    _, stored = produce_batches(namesrv, topic, args.messages, 128, 4)
                    produce[role].append(stored / (time.perf_counter() - started))
                    p50, p99, _ = sync_latency(namesrv, f"HaLat{run}", args.latency_samples)
                    p50s[role].append(p50)
                    p99s[role].append(p99)
                namesrv = pairs["ASYNC_MASTER"][0].namesrv_addr
                master_end, slave_end = ends["ASYNC_MASTER"]
                repl.append(
                    replication_throughput(
                        namesrv, master_end, slave_end, f"HaRepl{run}", args.messages
                    )
                    / 1e6
                )
                for rate in rates:
                    b, ms = sustained_lag(
                        namesrv, master_end, slave_end, f"HaRate{run}", rate, args.seconds
                    )
                    lag[rate][0].append(percentile(b, 0.99) / 1024)
                    lag[rate][1].append(max(b) / 1024)
                    lag[rate][2].append(percentile(ms, 0.5))
                    lag[rate][3].append(percentile(ms, 0.99))
        finally:
            for master_end, slave_end in ends.values():
                master_end.close()
                slave_end.close()
            for master, slave in pairs.values():
                slave.stop()
                master.stop()
    for role in roles:
        figures += [
            Figure(f"{role}: produce, send_batch 128 x 1 KB, 4 threads", "msg/s", produce[role]),
            Figure(f"{role}: sync send latency p50", "µs", p50s[role]),
            Figure(f"{role}: sync send latency p99", "µs", p99s[role]),
        ]
    figures.append(Figure("ASYNC_MASTER: replication throughput", "MB/s", repl))
    for rate in rates:
        p99b, maxb, p50ms, p99ms = lag[rate]
        figures += [
            Figure(f"ASYNC lag at {rate} msg/s: bytes p99", "KiB", p99b),
            Figure(f"ASYNC lag at {rate} msg/s: bytes max", "KiB", maxb),
            Figure(f"ASYNC lag at {rate} msg/s: p50", "ms", p50ms),
            Figure(f"ASYNC lag at {rate} msg/s: p99", "ms", p99ms),
        ]
    report("ha replication", figures)


if __name__ == "__main__":
    main()
