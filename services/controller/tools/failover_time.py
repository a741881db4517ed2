"""How long the controller takes to elect a new master once the master's heartbeats stop.

    python services/controller/tools/failover_time.py --rounds 10 --timeout-ms 2000 --scan-ms 500

Starts a private etcd and one controller; three replicas (threads speaking the wire protocol)
heartbeat every --beat-ms; each round stops the master's heartbeats and measures, from its
last heartbeat sent, until getSyncStateSet shows a new master (polled every 20 ms), then the
old replica comes back as a slave. Prints each round and p50 / max. The old master's write
lease (counted from that same heartbeat) is printed too: every figure must exceed it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ferry.protocol.messages import (
    ControllerGetSyncStateDataRequest,
    ControllerHeartbeatReply,
    ControllerHeartbeatRequest,
    ControllerRegisterBrokerRequest,
)
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.etcd import start_etcd
from ferry.runtime.launcher import start_service

CLUSTER, GROUP = "Bench", "broker-bench"


def ask(addr: str, body: Any) -> Any:
    client = BlockingClient(f"tcp://{addr}")
    try:
        got = client.call(body, 5000)
    finally:
        client.close()
    if got is None:
        raise SystemExit(f"no reply from {addr}")
    return got[0]


class Beater(threading.Thread):
    def __init__(self, addr: str, rid: int, beat_s: float) -> None:
        super().__init__(daemon=True)
        self.addr, self.rid, self.beat_s = addr, rid, beat_s
        self.paused = threading.Event()
        self.last_sent = 0.0
        self.lease_ms = 0
        self.epoch = 0
        self.master = False

    def run(self) -> None:
        client = BlockingClient(f"tcp://{self.addr}")
        while True:
            if not self.paused.is_set():
                body = ControllerHeartbeatRequest(
                    CLUSTER,
                    GROUP,
                    self.rid,
                    f"127.0.0.1:{30000 + self.rid}",
                    max_offset=100,
                    epoch=self.epoch,
                    role="MASTER" if self.master else "SLAVE",
                    sync_state_set=[1, 2, 3] if self.master else [],
                )
                sent = time.monotonic()
                got = client.call(body, 3000)
                if got and isinstance(got[0], ControllerHeartbeatReply):
                    self.last_sent = sent
                    self.master = got[0].master_id == self.rid
                    self.epoch = got[0].epoch
                    self.lease_ms = got[0].lease_ms
            time.sleep(self.beat_s)  # wait-ok: the heartbeat period


def master_of(addr: str) -> tuple[int, int, list[int]]:
    group = ask(addr, ControllerGetSyncStateDataRequest(broker_names=[GROUP])).groups[0]
    return group.master_id, group.epoch, group.sync_state_set


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--timeout-ms", type=int, default=2000)
    parser.add_argument("--scan-ms", type=int, default=500)
    parser.add_argument("--beat-ms", type=int, default=250)
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        etcd = start_etcd(Path(tmp) / "etcd")
        controller = start_service(
            "controller",
            [
                "--set", "controllerListenPort=0",
                "--set", f"etcdEndpoints={etcd.endpoint}",
                "--set", f"controllerHeartBeatTimeoutMills={ns.timeout_ms}",
                "--set", f"scanNotActiveBrokerInterval={ns.scan_ms}",
            ],
        )  # fmt: skip
        try:
            addr = controller.endpoints["addr"]
            beaters = []
            for rid in (1, 2, 3):
                ask(addr, ControllerRegisterBrokerRequest(CLUSTER, GROUP, rid, f"h:{30000 + rid}"))
                beaters.append(Beater(addr, rid, ns.beat_ms / 1000))
            for b in beaters:
                b.start()
            took: list[float] = []
            for n in range(ns.rounds):
                while True:  # a master with every replica in sync
                    master, epoch, isr = master_of(addr)
                    if master and isr == [1, 2, 3] and beaters[master - 1].lease_ms:
                        break
                    time.sleep(0.05)  # wait-ok: polling with the loop's own bound below
                old = beaters[master - 1]
                old.paused.set()
                time.sleep(ns.beat_ms / 1000 * 2)  # wait-ok: let an in-flight heartbeat end
                last, lease_ms = old.last_sent, old.lease_ms
                while master_of(addr)[1] == epoch:
                    time.sleep(0.02)  # wait-ok: polling the controller for the new master
                took.append(time.monotonic() - last)
                print(f"round {n + 1}: {took[-1]:.2f} s (old master's lease {lease_ms} ms)")
                old.master = False
                old.paused.clear()
            print(
                f"failover after the last heartbeat, {ns.rounds} rounds, timeout {ns.timeout_ms} "
                f"ms, scan {ns.scan_ms} ms: p50 {statistics.median(took):.2f} s, "
                f"max {max(took):.2f} s"
            )
        finally:
            controller.stop()
            etcd.stop()


if __name__ == "__main__":
    main()
