"""What CPython's cyclic collector costs the SDK's process on its hot paths.

    uv run --frozen --all-packages --group bench python bench/gc_cost.py [--runs 3]
        [--messages 100000]

Starts a local cluster (ASYNC_FLUSH). Per round: `--messages` single-message send_async calls
from one thread until every Future has its result (the peers table's workload), then a
PullConsumer reading 2 x `--messages` from the first offset (pulls of 512). gc.callbacks time
every collection of this process, by generation, and count the objects the collector tracks
when a full collection starts; /proc gives the process's minor page faults (a page touched
afresh costs 2-9 µs on this VM, bench/page_cache.py). The collector is left as CPython sets
it: the SDK never changes its host's collector.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from typing import Any

import client_throughput
from common import shown

from ferry.admin import Admin
from ferry.runtime.launcher import start_local_cluster


class CollectorClock:
    """Wall time and count of this process's collections, by generation."""

    def __init__(self) -> None:
        self.started = 0.0
        self.ms = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self.tracked_at_full = 0
        self.faults = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        gen = info["generation"]
        if phase == "start":
            if gen == 2:  # counted before the clock starts: get_objects() is not the collector
                self.tracked_at_full = max(self.tracked_at_full, len(gc.get_objects()))
            self.started = time.perf_counter()
        else:
            self.ms[gen] += (time.perf_counter() - self.started) * 1e3
            self.count[gen] += 1


def minor_faults() -> int:
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def measured(fn: Any, *args: Any) -> tuple[float, float, CollectorClock]:
    """(msg/s, wall s, collections) of fn(*args), which returns msg/s; the clock also keeps
    the page faults taken meanwhile."""
    clock = CollectorClock()
    gc.callbacks.append(clock)
    try:
        faults = minor_faults()
        started = time.perf_counter()
        rate = fn(*args)
        wall = time.perf_counter() - started
        clock.faults = minor_faults() - faults
    finally:
        gc.callbacks.remove(clock)
    return rate, wall, clock


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    rows: dict[str, list[tuple[float, float, CollectorClock]]] = {"send_async": [], "consume": []}
    moved = {"send_async": args.messages, "consume": 2 * args.messages}
    with tempfile.TemporaryDirectory() as data, start_local_cluster(data) as cluster:
        namesrv = cluster.namesrv_addr
        pids = [sp.pid for sp in cluster.processes]
        for run in range(args.runs):
            with Admin(namesrv) as admin:
                admin.create_topic(f"GcAsync{run}", 4, 4)
                admin.create_topic(f"GcPull{run}", 4, 4)
            client_throughput.settle(pids)
            rows["send_async"].append(
                measured(
                    client_throughput.send_async_singles, namesrv, f"GcAsync{run}", args.messages
                )
            )
            _, stored = client_throughput.produce_batches(
                namesrv, f"GcPull{run}", 2 * args.messages, 256, 4
            )
            client_throughput.settle(pids)
            rows["consume"].append(
                measured(client_throughput.consume, namesrv, f"GcPull{run}", f"gc-{run}", stored)
            )
            print(f"round {run} done", flush=True)
    print(
        f"\n# gc_cost {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{args.messages:,} send_async / {2 * args.messages:,} pulled, {args.runs} rounds; medians"
    )
    print(
        "| workload | msg/s | collector ms (gen0 / gen1 / gen2) | collections "
        "| share of wall | objects tracked at the largest full collection | page faults/msg |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, runs in rows.items():
        med = statistics.median
        per_gen = " / ".join(shown(med(c.ms[g] for _, _, c in runs)) for g in range(3))
        counts = " / ".join(str(int(med(c.count[g] for _, _, c in runs))) for g in range(3))
        share = med(sum(c.ms) / 1e3 / wall for _, wall, c in runs)
        tracked = int(med(c.tracked_at_full for _, _, c in runs))
        rate = med(r for r, _, _ in runs)
        faults = med(c.faults / moved[name] for _, _, c in runs)
        print(
            f"| {name} | {rate:,.0f} | {per_gen} | {counts} | {share:.0%} | {tracked:,} "
            f"| {faults:.3f} |"
        )


if __name__ == "__main__":
    main()
