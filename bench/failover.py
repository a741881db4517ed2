"""Failover in controller mode: from kill -9 of the master's whole `ferry serve broker` tree to
the first write acknowledged by a new master, over N rounds, under a steady producer and a
consumer group (the same group as tests/integration/test_failover.py: three replicas of
broker-a, a private etcd and controller, brokerHeartbeatInterval 300 ms).

    uv run python bench/failover.py [--rounds 10] [--timeout-ms 3000]

Prints each round, then p50 and max, the writes acknowledged, the sends that failed meanwhile
by error type, and whether anything acknowledged was lost (it must be 0).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

import failover_support
from failover_support import NO_LOSS, Traffic, final_log, kill_masters, start_group
from itest_support import wait_for

from ferry.admin import Admin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--timeout-ms", type=int, default=3000, help="the controller's")
    args = parser.parse_args()
    failover_support.HEARTBEAT_TIMEOUT_MS = args.timeout_ms
    with tempfile.TemporaryDirectory(prefix="ferry-failover-") as tmp:
        group = start_group(Path(tmp), settings=NO_LOSS)  # SEND_OK held by any electable replica
        try:
            return run(group, args.rounds)
        finally:
            group.close()


def run(group: failover_support.ControlledGroup, rounds: int) -> int:
    group.master(60)
    with Admin(group.namesrv_addr) as admin:
        admin.create_topic("Failover", 2, 2)
    traffic = Traffic(group.namesrv_addr)
    traffic.start()
    try:
        wait_for(lambda: len(traffic.acked) > 20, 30, "steady traffic")
        done = kill_masters(group, traffic, rounds, print)
    finally:
        traffic.stop()
    final = final_log(group, set(traffic.acked))
    lost = len(set(traffic.acked) - final)
    took = [r.acked for r in done]
    phases = ", ".join(
        f"{name} p50 {statistics.median(getattr(r, name) for r in done):.2f} s"
        for name in ("elected", "routed")
    )
    print(
        f"failover over {rounds} rounds: p50 {statistics.median(took):.2f} s, "
        f"max {max(took):.2f} s ({phases}); {len(traffic.acked)} acknowledged, lost {lost}; "
        f"failed sends meanwhile: {traffic.failed}"
    )
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
