"""Clusters of real processes for tests, started by the same launcher as `ferry dev up`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ferry.runtime.launcher import LocalCluster, start_broker_services, start_local_cluster

# Small segments so that rolling happens in tests.
SMALL_STORE = {
    "mappedFileSizeCommitLog": str(4 * 1024 * 1024),
    "mappedFileSizeConsumeQueue": str(20 * 50_000),
}

# The broker group's services but the store, dependents first (the order they are stopped in).
_ON_THE_STORE = ("broker-remoting", "ha-replicator", "checkback", "scheduler", "index")


@dataclass
class Cluster:
    dir: Path
    local: LocalCluster
    env: dict[str, str] | None = None
    overrides: dict[str, str] = field(default_factory=dict)

    @property
    def namesrv(self) -> str:
        return self.local.namesrv_addr

    @property
    def broker_addr(self) -> str:
        return self.local.broker_addr

    def restart_broker(self) -> None:
        """Stops the broker group (store, index, scheduler, check-back, HA, remoting) cleanly
        and starts it again on the same port and dir."""
        port = self.broker_addr.rsplit(":", 1)[1]
        # the HA port too: derived from the broker port (+1) it may be taken by now
        ha_port = self.local.ha_addr.rsplit(":", 1)[1]
        for name in (*_ON_THE_STORE, "broker-store"):
            sp = self.local.get(name)
            sp.stop()
            self.local.processes.remove(sp)
        start_broker_services(
            self.local,
            str(self.dir / "broker-a"),
            namesrv_addr=self.namesrv,
            broker_port=int(port),
            overrides={**self.overrides, "haListenPort": ha_port},
            env=self.env,
        )


def start_cluster(
    root: Path,
    env: dict[str, str] | None = None,
    overrides: dict[str, str] | None = None,
    *,
    rocketmq_port: int | None = None,
) -> Cluster:
    """A name server and a broker group on `root` (SMALL_STORE under `overrides`); with
    rocketmq_port, their RocketMQ doors (0: a free port)."""
    merged = {**SMALL_STORE, **(overrides or {})}
    local = start_local_cluster(str(root), overrides=merged, env=env, rocketmq_port=rocketmq_port)
    return Cluster(root, local, env, merged)


@contextmanager
def running_cluster(
    root: Path, env: dict[str, str] | None = None, overrides: dict[str, str] | None = None
) -> Iterator[Cluster]:
    """start_cluster for the block; its processes are stopped however the block ends."""
    c = start_cluster(root, env, overrides)
    try:
        yield c
    finally:
        c.local.stop()
