"""Faults under load (issue 25.6): each kind of service of a `ferry dev up` killed with -9,
several rounds each, while producers and a consumer group run all along; then the store and
remoting stopped (SIGSTOP) for 10 s each.

    uv run python bench/faults_under_load.py [--rounds 3] [--hang-s 10] [--kinds a,b] [--slave]

The load: two threads of sync sends and one of send_async (32 in flight), 3 s send timeout,
flushDiskType=SYNC_FLUSH, and a PushConsumer group reading the topic from its start. The kinds
are read from the running cluster's processes (so a new service is covered; with --slave the
slave group's too, as <kind>-slave, answering a ping). From each kill:
- back: the supervisor's `<kind> is back` line (the new process printed READY);
- serving: the first answer to a request only that kind serves, made as a client would:
  a send (store, remoting), a query by key (index), the scheduler's status through remoting,
  the check-back's and HA's status on their endpoints, a new client's topic route (name
  server: the broker must have registered again), the console's page.
After each kind's rounds, 50 more sends must be acknowledged, and the bench waits until the
group has received everything acknowledged so far: what it has not after 90 s is counted
lost. The restart policy (FERRY_RESTART_POLICY) waits 0.1 s before each restart by default,
so that the figures are the services' own, not the supervisor's doubling waits.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from consume_support import create_topic
from itest_support import DevUp
from supervision_support import (
    FaultLoad,
    Probes,
    dev_kinds,
    fault_order,
    kill_under_load,
    stop_under_load,
)

TOPIC = "FaultsBench"
POLICY = "first_wait=0.1,max_wait=0.1,max_crashes=1000,window=60"


@dataclass
class Row:
    fault: str
    ready_ms: list[float] = field(default_factory=list)
    serving_ms: list[float] = field(default_factory=list)
    failed: collections.Counter[str] = field(default_factory=collections.Counter)
    lost: int = 0
    duplicates: int = 0


def timing(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):,.0f} / {max(values):,.0f}"


def print_table(rows: list[Row], rounds: int, hang_s: float) -> None:
    head = (
        "| fault | rounds | to READY, ms (median / max) | to serving, ms (median / max) "
        "| sends failed meanwhile | acknowledged lost | duplicates consumed |"
    )
    print("\n" + head)
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        failed = ", ".join(f"{kind} {n}" for kind, n in sorted(row.failed.items())) or "0"
        stopped = row.fault.endswith("(SIGSTOP)")
        n = len(row.serving_ms) if stopped else rounds
        ready = f"- (not restarted, stopped {hang_s:g} s)" if stopped else timing(row.ready_ms)
        serving = timing(row.serving_ms) + (" after SIGCONT" if stopped else "")
        print(
            f"| {row.fault} | {n} | {ready} | {serving} | {failed} | {row.lost} "
            f"| {row.duplicates} |"
        )


def settle(load: FaultLoad, probes: Probes, row: Row, dup_before: int, what: str) -> None:
    """The load goes on, and everything acknowledged so far reaches the group."""
    load.wait_acked_more(50, what)
    row.lost = len(load.wait_consumed(probes.acked))
    row.duplicates = load.received.duplicates() - dup_before


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="kills per kind")
    parser.add_argument("--hang-s", type=float, default=10.0, help="SIGSTOP length (0: none)")
    parser.add_argument("--kinds", default="", help="only these kinds (comma-separated)")
    parser.add_argument("--slave", action="store_true", help="ferry dev up --slave")
    ns = parser.parse_args()
    os.environ.setdefault("FERRY_RESTART_POLICY", POLICY)
    rows: list[Row] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as data:
        slave = ("--slave",) if ns.slave else ()
        dev = DevUp(Path(data), *slave, "--set", "flushDiskType=SYNC_FLUSH", timeout=240)
        load: FaultLoad | None = None
        probes: Probes | None = None
        try:
            create_topic(dev.fields["namesrv"], TOPIC, 4)
            load = FaultLoad(dev.fields["namesrv"], TOPIC)
            load.start()
            load.wait_acked_more(100, "before the faults")
            probes = Probes(dev, TOPIC, key=sorted(load.figures.acked)[0].decode())
            order = fault_order(dev_kinds(dev))
            if ns.kinds:
                order = [k for k in order if k in ns.kinds.split(",")]
            print(f"kinds running: {', '.join(order)}; policy {os.environ['FERRY_RESTART_POLICY']}")
            for kind in order:
                row = Row(kind)
                failed_before = collections.Counter(load.figures.failed)
                dup_before = load.received.duplicates()
                for n in range(ns.rounds):
                    r = kill_under_load(dev, probes, kind)
                    row.ready_ms.append(r.to_ready_s * 1000)
                    row.serving_ms.append(r.to_serving_s * 1000)
                    print(
                        f"{kind} round {n + 1}: back {row.ready_ms[-1]:.0f} ms, "
                        f"serving {row.serving_ms[-1]:.0f} ms",
                        flush=True,
                    )
                    load.wait_acked_more(20, f"after {kind}'s restart")
                settle(load, probes, row, dup_before, f"after the kills of {kind}")
                row.failed = +(collections.Counter(load.figures.failed) - failed_before)
                rows.append(row)
            for kind in ("broker-store", "broker-remoting") if ns.hang_s > 0 else ():
                row = Row(f"{kind} (SIGSTOP)")
                dup_before = load.received.duplicates()
                hang = stop_under_load(dev, load, probes, kind, ns.hang_s)
                assert not hang.replaced, hang
                assert not hang.supervisor_said, hang
                row.serving_ms.append(hang.to_serving_s * 1000)
                row.failed = hang.failed
                settle(load, probes, row, dup_before, f"after {kind} resumed")
                print(f"{kind} stopped {ns.hang_s:g} s: {hang}", flush=True)
                rows.append(row)
            load.stop_sending()
            lost = load.wait_consumed(probes.acked)
            print_table(rows, ns.rounds, ns.hang_s)
            print(f"\nin all: {load.summary()}; {len(lost)} acknowledged never consumed")
            print(f"{time.monotonic() - started:.0f} s")
            if lost or load.figures.untyped:
                sys.exit(1)
        finally:
            if probes is not None:
                probes.close()
            if load is not None:
                load.close()
            dev.close()


if __name__ == "__main__":
    main()
