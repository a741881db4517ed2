"""What controller mode costs steady produce throughput: the same SYNC_MASTER group of three
(a master and two slaves, each its own `ferry serve broker` tree, the broker.conf of
tests/integration/failover_support.py) without and with enableControllerMode, and with
controller mode plus allAckInSyncStateSet (every in-sync slave acks each send, not one).

    uv run python bench/controller_cost.py [--rounds 5] [--messages 20000]

The groups run side by side (each with its own name server; the controller-mode ones with
their own etcd and controller) and every round measures each group right after the other (a
different one first each round), so a change of load on this shared machine hits all of them
alike; the idle groups' heartbeats run during every group's rounds alike. A round:
send_batch of 128 x 1 KB from 4 threads (bench/client_throughput.py's produce_batches), msg/s
from the first send to the last answer. Prints median and spread (min-max) per group, and of
each round's ratio to the group without controller mode in that round.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from client_throughput import produce_batches
from common import Figure, report
from failover_support import ControlledGroup, Replica, in_sync_count, start_group
from ha_support import broker_ids, status
from itest_support import wait_for

from ferry.admin import Admin
from ferry.protocol.messages import HaStatusReply, HaStatusRequest
from ferry.runtime.launcher import service_args, start_service

CLASSIC = "SYNC_MASTER, no controller"
CONTROLLER = "SYNC_MASTER, enableControllerMode"
ALL_ACK = "SYNC_MASTER, enableControllerMode + allAckInSyncStateSet"


class ClassicGroup:
    """broker-a as before controller mode: brokerId 0 a SYNC_MASTER, ids 1 and 2 SLAVEs
    of its haListenPort; otherwise the broker.conf of the controller-mode replicas."""

    def __init__(self, root: Path) -> None:
        self.namesrv = start_service("namesrv", service_args(None, {"listenPort": "0"}))
        self.replicas: list[Replica] = []
        try:
            off = {"enableControllerMode": "false"}
            master = Replica(root / "m", 0, "", self.namesrv_addr, off)
            self.replicas.append(master)
            for i in (1, 2):
                slave = {**off, "brokerRole": "SLAVE", "haMasterAddress": master.ha_addr}
                self.replicas.append(Replica(root / f"s{i}", i, "", self.namesrv_addr, slave))
        except BaseException:
            self.close()
            raise

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.endpoints["addr"]

    def in_sync(self) -> bool:
        reply = status(self.replicas[0].ha_addr, HaStatusRequest())
        return isinstance(reply, HaStatusReply) and sum(s.in_sync for s in reply.slaves) == 2

    def close(self) -> None:
        for replica in self.replicas:
            replica.close()
        self.namesrv.stop()


def wait_ready(namesrv: str, in_sync: Callable[[], bool], topic: str) -> None:
    wait_for(lambda: 0 in broker_ids(namesrv), 120, "the master routed as id 0")
    wait_for(in_sync, 120, "both slaves in sync")
    with Admin(namesrv) as admin:
        admin.create_topic(topic, 4, 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=20_000, help="per round")
    parser.add_argument("--no-all-ack", action="store_true", help="skip the allAck group")
    args = parser.parse_args()
    runs: dict[str, list[float]] = {CLASSIC: [], CONTROLLER: []}
    if not args.no_all_ack:
        runs[ALL_ACK] = []
    with tempfile.TemporaryDirectory(prefix="ferry-controller-cost-") as tmp:
        namesrvs: dict[str, str] = {}
        classic: ClassicGroup | None = None
        controlled: dict[str, ControlledGroup] = {}
        try:
            classic = ClassicGroup(Path(tmp) / "classic")
            namesrvs[CLASSIC] = classic.namesrv_addr
            wait_ready(classic.namesrv_addr, classic.in_sync, "Cost")
            for name, settings in ((CONTROLLER, {}), (ALL_ACK, {"allAckInSyncStateSet": "true"})):
                if name not in runs:
                    continue
                group = start_group(Path(tmp) / name.split()[-1], settings=settings)
                controlled[name] = group
                namesrvs[name] = group.namesrv_addr
                group.master(60)
                wait_ready(group.namesrv_addr, lambda g=group: in_sync_count(g) == 3, "Cost")
            names = list(runs)
            for i in range(args.rounds):
                # each round starts with another group: no group always runs first or last
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    started = time.perf_counter()
                    _, stored = produce_batches(namesrvs[name], "Cost", args.messages, 128, 4)
                    rate = stored / (time.perf_counter() - started)
                    runs[name].append(rate)
                    print(f"round {i + 1}: {name}: {rate:,.0f} msg/s", flush=True)
        finally:
            for group in controlled.values():
                group.close()
            if classic is not None:
                classic.close()
    figures = [
        Figure(f"{name}: produce, send_batch 128 x 1 KB, 4 threads", "msg/s", values)
        for name, values in runs.items()
    ]
    # each round's figure against the group without controller mode in the same round: the
    # machine's load moves all of a round alike, so these ratios spread less than the rates
    figures += [
        Figure(
            f"{name} / no controller, same round",
            "%",
            [100 * v / b for v, b in zip(values, runs[CLASSIC], strict=True)],
        )
        for name, values in runs.items()
        if name != CLASSIC
    ]
    report("controller cost", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
