"""Helpers for HA tests: a master group and its slave group as real processes, their
replicators' status, and stopping, killing or restarting one group apart from the other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itest_support import SMALL_STORE, RawClient, wait_for

from ferry.protocol.messages import (
    GetClusterInfoRequest,
    HaStatusReply,
    HaStatusRequest,
    StoreStatusReply,
    StoreStatusRequest,
)
from ferry.runtime.launcher import (
    LocalCluster,
    ServiceProcess,
    add_slave_group,
    start_broker_services,
    start_local_cluster,
)

BROKER_SERVICES = (
    "broker-remoting",
    "ha-replicator",
    "checkback",
    "scheduler",
    "index",
    "broker-store",
)
# short HA periods so that tests see silence, syncs and reconnects quickly
HA_FAST = {
    **SMALL_STORE,
    "haSendHeartbeatInterval": "1000",
    "slaveSynchronizeInterval": "300",
    "syncFlushTimeout": "1000",
}


def status(addr: str, request: Any) -> Any:
    client = RawClient(addr)
    try:
        return client.call(request)[0]
    finally:
        client.close()


def ha_status(group: LocalCluster) -> HaStatusReply:
    reply = status(group.ha_addr, HaStatusRequest())
    assert isinstance(reply, HaStatusReply), reply
    return reply


def store_status(group: LocalCluster) -> StoreStatusReply:
    reply = status(group.store_endpoint, StoreStatusRequest())
    assert isinstance(reply, StoreStatusReply), reply
    return reply


def broker_ids(namesrv: str, broker_name: str = "broker-a") -> set[int]:
    info = status(namesrv, GetClusterInfoRequest())
    data = info.brokers.get(broker_name)
    return set(data.broker_addrs) if data is not None else set()


@dataclass
class HaPair:
    dir: Path
    master: LocalCluster
    slave: LocalCluster
    overrides: dict[str, str] = field(default_factory=dict)

    @property
    def namesrv(self) -> str:
        return self.master.namesrv_addr

    def broker_processes(self, group: LocalCluster) -> list[ServiceProcess]:
        return [sp for sp in group.processes if sp.name in BROKER_SERVICES]

    def stop_master(self, *, kill: bool = False) -> None:
        for sp in self.broker_processes(self.master):
            if kill:
                sp.kill()
            else:
                sp.stop()
            self.master.processes.remove(sp)

    def start_master(self, *, wipe: bool = False) -> None:
        """Starts the master group again on its ports (the slave knows its HA address)."""
        root = self.dir / "broker-a"
        if wipe:
            import shutil

            shutil.rmtree(root)
        port = self.master.broker_addr.rsplit(":", 1)[1]
        ha_port = self.master.ha_addr.rsplit(":", 1)[1]
        start_broker_services(
            self.master,
            str(root),
            namesrv_addr=self.namesrv,
            broker_port=int(port),
            overrides={**self.overrides, "haListenPort": ha_port},
        )

    def stop_slave(self) -> None:
        self.slave.stop()

    def start_slave(self) -> None:
        self.slave = add_slave_group(
            self.master, str(self.dir / "broker-a-s"), overrides=self.overrides
        )

    def wait_in_sync(self, timeout: float = 60.0) -> int:
        """Waits until the slave's log ends where the master's does; returns that offset."""

        def synced() -> int | None:
            end = store_status(self.master).max_offset
            return end if store_status(self.slave).max_offset == end else None

        return int(wait_for(synced, timeout, "the slave to catch up") or 0)

    def close(self) -> None:
        self.slave.stop()
        self.master.stop()


def start_pair(tmp_path: Path, **overrides: str) -> HaPair:
    merged = {**HA_FAST, **overrides}
    master = start_local_cluster(str(tmp_path), overrides=merged)
    try:
        slave = add_slave_group(master, str(tmp_path / "broker-a-s"), overrides=merged)
    except BaseException:
        master.stop()
        raise
    pair = HaPair(tmp_path, master, slave, merged)
    wait_for(lambda: broker_ids(pair.namesrv) == {0, 1}, 60, "master and slave routed")
    return pair
