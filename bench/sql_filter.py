"""What an SQL92 filter costs consume (issue 29), on one local cluster with
enablePropertyFilter=true, all filters in the same run:

    uv run python bench/sql_filter.py [--runs 3] [--messages 100000]

--messages 1 KB messages (8 queues) carry tags A/B alternately and properties amount
(i % 1000) and region (eu/us). Each run then consumes all of them once per filter, each
with a new PullConsumer group from the first offset (pulls of 512, as client_throughput's
consume), in a different order each run:
- none: "*";
- tag 50%: "A" (the ConsumeQueue's tag hash, then the SDK's exact check);
- sql 50%: "amount >= 500";
- sql 50% tags: "TAGS = 'A'" (the same messages as tag 50%, by SQL);
- sql 100%: "amount >= 0 AND region IN ('eu', 'us')".
It reports messages delivered per second, queue entries covered per second (delivered and
skipped: the work the broker does), and the cluster's CPU per queue entry (every service
process, once the cluster has settled: client_throughput's settle()).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from typing import Any

from client_throughput import _cluster_cpu, settle
from common import Figure, report

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, MessageSelector, Producer, PullConsumer
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 1024
TOPIC = "BenchSql"
FILTERS: dict[str, tuple[Any, float]] = {  # name -> (expression, share of messages selected)
    "none": ("*", 1.0),
    "tag 50%": ("A", 0.5),
    "sql 50%": (MessageSelector.by_sql("amount >= 500"), 0.5),
    "sql 50% tags": (MessageSelector.by_sql("TAGS = 'A'"), 0.5),
    "sql 100%": (MessageSelector.by_sql("amount >= 0 AND region IN ('eu', 'us')"), 1.0),
}


def produce(namesrv: str, messages: int, batch: int = 128, threads: int = 4) -> None:
    per_thread = messages // threads

    def work(first: int) -> None:
        with Producer(f"bench-sql-{first}", namesrv) as producer:
            for start in range(first, first + per_thread, batch):
                producer.send_batch(
                    [
                        Message(
                            TOPIC,
                            BODY,
                            tags="A" if i % 2 == 0 else "B",
                            properties={
                                "amount": str(i % 1000),
                                "region": "eu" if i % 4 < 2 else "us",
                            },
                        )
                        for i in range(start, min(start + batch, first + per_thread))
                    ]
                )

    pool = [threading.Thread(target=work, args=(t * per_thread,)) for t in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def consume(namesrv: str, group: str, expression: Any, expected: int) -> float:
    """Seconds to receive `expected` messages (exactly: more or fewer fails the run)."""
    got = 0
    started = time.perf_counter()
    with PullConsumer(
        group,
        namesrv,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        pull_batch_size=512,
        pull_threshold_for_queue=2000,
    ) as consumer:
        consumer.subscribe(TOPIC, expression)
        deadline = time.monotonic() + 180
        while got < expected and time.monotonic() < deadline:
            got += len(consumer.poll(timeout=1.0))
        elapsed = time.perf_counter() - started
        got += len(consumer.poll(timeout=0.5))  # anything past `expected` is a wrong filter
    if got != expected:
        raise RuntimeError(f"{group}: consumed {got}, expected {expected}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    n = args.messages - args.messages % 4
    runs: dict[str, dict[str, list[float]]] = {
        name: {"msgs": [], "entries": [], "cpu": []} for name in FILTERS
    }
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data, overrides={"enablePropertyFilter": "true"})
        try:
            namesrv = cluster.namesrv_addr
            pids = [sp.pid for sp in cluster.processes]
            with Admin(namesrv) as admin:
                admin.create_topic(TOPIC, 8, 8)
            produce(namesrv, n)
            names = list(FILTERS)
            for r in range(args.runs):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    expression, share = FILTERS[name]
                    expected = int(n * share)
                    settle(pids)
                    cpu0 = _cluster_cpu(pids)
                    group = f"bench-sql-{r}-{names.index(name)}"
                    seconds = consume(namesrv, group, expression, expected)
                    cpu = _cluster_cpu(pids) - cpu0
                    runs[name]["msgs"].append(expected / seconds)
                    runs[name]["entries"].append(n / seconds)
                    runs[name]["cpu"].append(cpu / n * 1e6)
                    print(f"run {r} {name}: {expected / seconds:,.0f} msg/s", flush=True)
        finally:
            cluster.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    figures: list[Figure] = []
    for name in FILTERS:
        figures.append(Figure(f"consume, {name}: delivered", "msg/s", runs[name]["msgs"]))
        figures.append(
            Figure(f"consume, {name}: entries covered", "entries/s", runs[name]["entries"])
        )
        figures.append(Figure(f"consume, {name}: cluster CPU", "µs/entry", runs[name]["cpu"]))
    report("sql filter", figures)


if __name__ == "__main__":
    main()
