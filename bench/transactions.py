"""Transactions: what the transaction checker costs a broker that stores ordinary traffic, and
send_in_transaction end to end.

    uv run python bench/transactions.py [--runs 3] [--messages 100000] [--transactions 500]

Both on a local cluster (launcher, the whole broker group: store, index, scheduler,
check-back, HA, remoting).

Ordinary traffic: --messages non-transactional 1 KiB messages produced with send_batch of 128
from 4 threads (as bench/client_throughput.py), while the check-back and the store are watched:
their CPU time (utime + stime from /proc/<pid>/stat) from just before the first batch until the
check-back is idle again, per 100,000 messages, and the produce rate; and the check-back's CPU at
rest (10 s without traffic: its timers and idle long polls), which that figure includes for the
seconds the run lasts. The check-back does nothing else for ordinary messages, so the rest is
what the checker costs them.

End to end: a TransactionProducer sends --transactions messages one after another with a
listener that commits at once: each is a half-message send, the local transaction and an
END_TRANSACTION request (remoting reads the half back, stores its commit mark and the copy at
once, answers, and stores the op record). Transactions per second and the latency of one
send_in_transaction.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

from client_throughput import produce_batches
from common import Figure, percentile, report

from ferry.admin import Admin
from ferry.client import LocalTransactionState, Message, MessageExt, TransactionProducer
from ferry.runtime.launcher import LocalCluster, start_local_cluster

TOPIC = "BenchTx"
BODY = b"x" * 1024
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def settle(pid: int, quiet_s: float = 1.5, deadline_s: float = 120.0) -> None:
    """Waits until the process used less than 20 ms of CPU over quiet_s (its backlog done)."""
    end = time.monotonic() + deadline_s
    last = cpu_s(pid)
    while time.monotonic() < end:
        time.sleep(quiet_s)  # sampling interval of a deadline-bounded wait
        now = cpu_s(pid)
        if now - last < 0.02:
            return
        last = now


def at_rest(cluster: LocalCluster, seconds: float = 10.0) -> float:
    """The check-back's CPU with no traffic at all, in ms per second (its timers and polls)."""
    checkback = cluster.get("checkback").pid
    settle(checkback)
    before = cpu_s(checkback)
    time.sleep(seconds)  # the measured interval itself
    return (cpu_s(checkback) - before) * 1000 / seconds


def ordinary_cost(
    cluster: LocalCluster, topic: str, messages: int, rest_ms: float
) -> tuple[float, float, float, float]:
    """(check-back CPU ms, the same less its CPU at rest over the run, store CPU ms) per 100k
    ordinary messages, and the produce rate."""
    checkback = cluster.get("checkback").pid
    store = cluster.get("broker-store").pid
    settle(checkback)
    sched0, store0, started = cpu_s(checkback), cpu_s(store), time.monotonic()
    rate, stored = produce_batches(cluster.namesrv_addr, topic, messages, 128, 4)
    settle(checkback)
    per = 100_000 / stored
    used = (cpu_s(checkback) - sched0) * 1000
    net = used - rest_ms * (time.monotonic() - started)
    return used * per, net * per, (cpu_s(store) - store0) * 1000 * per, rate


class Commit:
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def end_to_end(namesrv: str, transactions: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    with TransactionProducer("bench-tx", namesrv, Commit()) as producer:
        producer.send_in_transaction(Message(TOPIC, BODY))  # routes and connections warm
        started = time.perf_counter()
        for _ in range(transactions):
            t = time.perf_counter()
            producer.send_in_transaction(Message(TOPIC, BODY))
            latencies.append((time.perf_counter() - t) * 1e6)
        rate = transactions / (time.perf_counter() - started)
    return rate, latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--transactions", type=int, default=500)
    args = parser.parse_args()

    rest: list[float] = []
    sched: list[float] = []
    net: list[float] = []
    store: list[float] = []
    produce: list[float] = []
    rates: list[float] = []
    p50: list[float] = []
    p99: list[float] = []
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        try:
            with Admin(cluster.namesrv_addr) as admin:
                admin.create_topic(TOPIC, 4, 4)
                for run in range(args.runs):
                    admin.create_topic(f"BenchPlain{run}", 4, 4)
            for run in range(args.runs):
                rest.append(at_rest(cluster))
                s, n, st, rate = ordinary_cost(cluster, f"BenchPlain{run}", args.messages, rest[-1])
                sched.append(s)
                net.append(n)
                store.append(st)
                produce.append(rate)
            for _ in range(args.runs):
                rate, latencies = end_to_end(cluster.namesrv_addr, args.transactions)
                rates.append(rate)
                p50.append(percentile(latencies, 0.5))
                p99.append(percentile(latencies, 0.99))
        finally:
            cluster.stop()
    report(
        "transactions",
        [
            Figure("check-back CPU at rest (no traffic)", "ms/s", rest),
            Figure("check-back CPU per 100k ordinary 1 KiB messages", "ms", sched),
            Figure("  less its CPU at rest over the run", "ms", net),
            Figure("broker-store CPU per 100k ordinary 1 KiB messages", "ms", store),
            Figure("produce, send_batch 128 x 1 KiB, 4 threads", "msg/s", produce),
            Figure("send_in_transaction, COMMIT, one at a time", "tx/s", rates),
            Figure("send_in_transaction latency p50", "µs", p50),
            Figure("send_in_transaction latency p99", "µs", p99),
        ],
    )


if __name__ == "__main__":
    main()
