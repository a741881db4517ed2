"""Controller mode as the failover tests run it: a private etcd, a controller, a name server,
and broker replicas of one group, each a `ferry serve broker` process tree in a session of its
own, so that killing or pausing the tree models losing one machine."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ha_support import status
from itest_support import FERRY, LineReader, wait_for

from ferry.client import (
    ConsumeFromWhere,
    FerryError,
    Message,
    Producer,
    PullConsumer,
    SendStatus,
)
from ferry.protocol.messages import (
    ControllerGetSyncStateDataRequest,
    ControllerSyncStateDataReply,
    HaStatusReply,
    HaStatusRequest,
)
from ferry.runtime.etcd import EtcdProcess, start_etcd
from ferry.runtime.launcher import ServiceProcess, service_args, start_controller, start_service

FAST_POLICY = "first_wait=0.1,max_wait=1,max_crashes=10,window=60"
HEARTBEAT_TIMEOUT_MS = 3000  # the controller's: a master silent this long is replaced


class Replica:
    """One `ferry serve broker` tree of broker-a in controller mode."""

    def __init__(self, root: Path, replica_id: int, controller: str, namesrv: str) -> None:
        self.root = root
        self.replica_id = replica_id
        settings = {
            "brokerName": "broker-a",
            "brokerId": str(replica_id),
            "brokerRole": "SYNC_MASTER",
            "enableControllerMode": "true",
            "controllerAddr": controller,
            "namesrvAddr": namesrv,
            "storePathRootDir": str(root),
            "listenPort": "0",
            "flushDiskType": "SYNC_FLUSH",
            "mappedFileSizeCommitLog": "1048576",
            "brokerHeartbeatInterval": "300",
            "haSendHeartbeatInterval": "500",
            "slaveSynchronizeInterval": "500",
            "syncFlushTimeout": "2000",
        }
        argv = [FERRY, "serve", "broker", *service_args(None, settings)]
        env = {**os.environ, "FERRY_RESTART_POLICY": FAST_POLICY}
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: the whole tree is one signal
        )
        assert self.proc.stdout is not None
        self.reader = LineReader(self.proc.stdout)
        ready = self.reader.wait_for_prefix("READY broker ", timeout=120)
        fields = dict(part.split("=", 1) for part in ready.split()[2:])
        self.addr = fields["addr"]
        self.ha_addr = fields["ha"]

    def last_role(self) -> str:
        return _last_role(self)

    def said(self, fragment: str) -> bool:
        return any(fragment in line for line in self.reader.take())

    def kill_tree(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def pause_tree(self) -> None:
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume_tree(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(30)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.reader.close()


@dataclass
class ControlledGroup:
    etcd: EtcdProcess
    controller: ServiceProcess
    namesrv: ServiceProcess
    root: Path
    replicas: dict[int, Replica] = field(default_factory=dict)

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.endpoints["addr"]

    @property
    def controller_addr(self) -> str:
        return self.controller.endpoints["addr"]

    def start_replica(self, replica_id: int) -> Replica:
        """Starts replica_id's tree (again, on its store, after a kill)."""
        old = self.replicas.pop(replica_id, None)
        if old is not None:
            old.close()
        replica = Replica(
            self.root / f"replica-{replica_id}", replica_id, self.controller_addr, self.namesrv_addr
        )
        self.replicas[replica_id] = replica
        return replica

    def others(self, replica: Replica) -> list[Replica]:
        return [r for r in self.replicas.values() if r is not replica and r.proc.poll() is None]

    def master(self, timeout: float = 30) -> Replica:
        """The replica whose agent said it was elected last."""

        def elected() -> Replica | None:
            live = [r for r in self.replicas.values() if r.proc.poll() is None]
            masters = [r for r in live if _last_role(r) == "master"]
            return masters[0] if len(masters) == 1 else None

        found: Replica = wait_for(elected, timeout, "one elected master")
        return found

    def close(self) -> None:
        for replica in self.replicas.values():
            replica.close()
        self.namesrv.stop()
        self.controller.stop()
        self.etcd.stop()


def ha_end(replica: Replica) -> int | None:
    """A master's log end as its ha-replicator reports it."""
    reply = status(replica.ha_addr, HaStatusRequest())
    if isinstance(reply, HaStatusReply) and reply.role != "SLAVE":
        return reply.master_max_offset or None
    return None


def ha_applied(replica: Replica) -> int | None:
    """How far a slave's log holds its master's."""
    reply = status(replica.ha_addr, HaStatusRequest())
    if isinstance(reply, HaStatusReply) and reply.role == "SLAVE":
        return reply.applied_offset
    return None


def _last_role(replica: Replica) -> str:
    for line in reversed(replica.reader.take()):
        if "[agent] elected master" in line:
            return "master"
        if "[agent] slave of replica" in line:
            return "slave"
    return ""


def start_group(root: Path, replicas: int = 3) -> ControlledGroup:
    etcd = start_etcd(root / "etcd")
    controller = namesrv = None
    try:
        controller = start_controller(etcd.endpoint, HEARTBEAT_TIMEOUT_MS, scan_ms=200)
        namesrv = start_service("namesrv", service_args(None, {"listenPort": "0"}))
        group = ControlledGroup(etcd, controller, namesrv, root)
        for replica_id in range(1, replicas + 1):
            group.start_replica(replica_id)
        return group
    except BaseException:
        for sp in (namesrv, controller):
            if sp is not None:
                sp.stop()
        etcd.stop()
        raise


class Traffic:
    """A producer sending without pause and a consumer group reading, on their own threads:
    what was acknowledged, what failed (by error type), what was delivered."""

    def __init__(self, namesrv: str) -> None:
        self.acked: list[bytes] = []
        self.failed: dict[str, int] = {}
        self.delivered: set[bytes] = set()
        self._stop = threading.Event()
        self._producer = Producer("pg-rounds", namesrv, send_timeout_ms=3000)
        self._consumer = PullConsumer(
            "cg-rounds", namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
        )
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def start(self) -> None:
        self._producer.start()
        self._consumer.subscribe("Failover")
        for thread in self._threads:
            thread.start()

    def _produce(self) -> None:
        i = 0
        while not self._stop.is_set():
            body = f"r-{i}".encode()
            i += 1
            try:
                if self._producer.send(Message("Failover", body)).status == SendStatus.SEND_OK:
                    self.acked.append(body)
            except FerryError as err:
                name = type(err).__name__
                self.failed[name] = self.failed.get(name, 0) + 1

    def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                self.delivered.update(m.body for m in self._consumer.poll(timeout=0.5))
            except FerryError:
                time.sleep(0.1)  # wait-ok: the brokers move; the next poll finds the route

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        self._producer.shutdown()
        self._consumer.shutdown()


def in_sync_count(group: ControlledGroup) -> int:
    reply = status(group.controller_addr, ControllerGetSyncStateDataRequest())
    assert isinstance(reply, ControllerSyncStateDataReply), reply
    return len(reply.groups[0].sync_state_set) if reply.groups else 0


def kill_masters(
    group: ControlledGroup, traffic: Traffic, rounds: int, say: Any = None
) -> list[float]:
    """`rounds` times: once a slave is in sync, kill -9 the master's tree and time until the
    next acknowledged write; then start the killed tree again (the lost machine comes back)."""
    took: list[float] = []
    for i in range(rounds):
        wait_for(lambda: in_sync_count(group) >= 2, 60, "a slave in sync")
        master = group.master(30)
        before = len(traffic.acked)
        killed_at = time.monotonic()
        master.kill_tree()
        wait_for(lambda n=before: len(traffic.acked) > n, 60, "a write on a new master")
        took.append(time.monotonic() - killed_at)
        assert group.master(30) is not master
        if say is not None:
            say(f"round {i + 1}: replica {master.replica_id} killed, writes after {took[-1]:.2f} s")
        group.start_replica(master.replica_id)
    return took


def final_log(group: ControlledGroup, want: set[bytes], wait_s: float = 60) -> set[bytes]:
    """Every body of the Failover topic a new consumer group reads from the start (until it
    has read `want`, or wait_s passed): what the group's log finally holds."""
    final: set[bytes] = set()
    with PullConsumer(
        "cg-final-log", group.namesrv_addr, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe("Failover")
        deadline = time.monotonic() + wait_s
        while not want <= final and time.monotonic() < deadline:
            final.update(m.body for m in consumer.poll(timeout=0.5))
    return final
