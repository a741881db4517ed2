"""The controller (issue 26) on a real etcd, with test threads acting as brokers over the wire
protocol: registration, the first election, failover to an in-sync replica when the master's
heartbeats stop (and never to an out-of-sync one, unless unclean election is allowed), two
controllers electing once, an etcd restart that changes nothing, and the admin commands.

Heartbeat timeout 2000 ms (etcd's shortest lease is about 2 s), scan every 500 ms.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fuzz_frames import any_frames, well_formed
from fuzz_targets import ZmqTarget, drive
from hypothesis import strategies as st
from itest_support import LineReader, wait_for

from ferry.protocol.messages import (
    MASTER_ROLE,
    SLAVE_ROLE,
    BrokerGroupState,
    ControllerCleanBrokerDataRequest,
    ControllerElectMasterRequest,
    ControllerGetMetadataRequest,
    ControllerGetSyncStateDataRequest,
    ControllerHeartbeatReply,
    ControllerHeartbeatRequest,
    ControllerRegisterBrokerReply,
    ControllerRegisterBrokerRequest,
    ControllerSyncStateDataReply,
    ErrorReply,
    PingRequest,
    PongReply,
)
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.etcd import EtcdProcess, start_etcd
from ferry.runtime.launcher import ServiceProcess, start_service

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
CLUSTER = "C"
TIMEOUT_MS = 2000
SCAN_MS = 500
BEAT_S = 0.25
# from the master's last heartbeat to a new master: its etcd lease (2 s), etcd's expiry check
# (up to 0.5 s), a scan (0.5 s), and slack for a loaded machine
FAILOVER_BOUND_S = 6.0


def controller_args(etcd: EtcdProcess, *extra: str) -> list[str]:
    args = [
        "--set",
        "controllerListenPort=0",
        "--set",
        f"etcdEndpoints={etcd.endpoint}",
        "--set",
        f"controllerHeartBeatTimeoutMills={TIMEOUT_MS}",
        "--set",
        f"scanNotActiveBrokerInterval={SCAN_MS}",
    ]
    for item in extra:
        args += ["--set", item]
    return args


def call(addr: str, body: Any, timeout_ms: int = 5000) -> Any:
    client = BlockingClient(f"tcp://{addr}")
    try:
        got = client.call(body, timeout_ms)
    finally:
        client.close()
    assert got is not None, f"no reply from {addr}"
    return got[0]


def group_state(addr: str, name: str) -> BrokerGroupState:
    reply = call(addr, ControllerGetSyncStateDataRequest(broker_names=[name]))
    assert isinstance(reply, ControllerSyncStateDataReply), reply
    return reply.groups[0]


@dataclass
class Beat:
    sent: float  # monotonic, when the heartbeat was sent
    reply: Any


@dataclass
class Replica:
    """A broker's controller side: registers, then heartbeats every BEAT_S on its thread,
    acting as master (its in-sync set `isr`) while the controller says it is."""

    addr: str  # the controller's
    name: str
    rid: int
    max_offset: int = 100
    isr: list[int] = field(default_factory=list)
    beats: list[Beat] = field(default_factory=list)
    running: bool = False
    epoch: int = 0
    master: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{20000 + self.rid}"

    def register(self) -> None:
        reply = call(
            self.addr,
            ControllerRegisterBrokerRequest(
                CLUSTER, self.name, self.rid, self.broker_addr, f"127.0.0.1:{21000 + self.rid}"
            ),
        )
        assert isinstance(reply, ControllerRegisterBrokerReply), reply

    def start(self) -> Replica:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self.running = True
        return self

    def stop(self) -> float:
        """Stops heartbeating; the monotonic time of the last heartbeat sent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.running = False
        return self.beats[-1].sent if self.beats else 0.0

    def _run(self) -> None:
        client = BlockingClient(f"tcp://{self.addr}")
        try:
            while not self._stop.is_set():
                body = ControllerHeartbeatRequest(
                    CLUSTER,
                    self.name,
                    self.rid,
                    self.broker_addr,
                    max_offset=self.max_offset,
                    epoch=self.epoch,
                    role=MASTER_ROLE if self.master else SLAVE_ROLE,
                    sync_state_set=self.isr if self.master else [],
                )
                sent = time.monotonic()
                got = client.call(body, 3000)
                reply = got[0] if got else None
                self.beats.append(Beat(sent, reply))
                if isinstance(reply, ControllerHeartbeatReply):
                    self.master = reply.master_id == self.rid
                    self.epoch = reply.epoch
                self._stop.wait(BEAT_S)
        finally:
            client.close()

    def last_reply(self) -> Any:
        return self.beats[-1].reply if self.beats else None


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    proc = start_etcd(tmp_path_factory.mktemp("etcd") / "data")
    try:
        yield proc
    finally:
        proc.stop()


def start_controller(etcd: EtcdProcess, *extra: str) -> ServiceProcess:
    return start_service("controller", controller_args(etcd, *extra), ready_timeout=30)


@pytest.fixture(scope="module")
def controller(etcd: EtcdProcess) -> Iterator[ServiceProcess]:
    sp = start_controller(etcd)
    try:
        yield sp
    finally:
        assert sp.stop() == 0


def group_of(addr: str, name: str, n: int = 3) -> list[Replica]:
    replicas = [Replica(addr, name, rid) for rid in range(1, n + 1)]
    for r in replicas:
        r.register()
    return replicas


def elected(addr: str, name: str, epoch: int) -> BrokerGroupState:
    """Waits until the group has a master of `epoch` and returns its state."""
    state: BrokerGroupState = wait_for(
        lambda: (s := group_state(addr, name)).epoch == epoch and s.master_id and s,
        timeout=FAILOVER_BOUND_S + 4,
        what=f"a master of {name} with epoch {epoch}",
    )
    return state


def wait_answered_again(replicas: list[Replica]) -> None:
    """Waits until every replica's heartbeat is answered by a heartbeat reply again."""
    since = [len(r.beats) for r in replicas]
    wait_for(
        lambda: all(
            any(isinstance(b.reply, ControllerHeartbeatReply) for b in r.beats[n:])
            for r, n in zip(replicas, since, strict=True)
        ),
        what="heartbeats answered again",
    )


def stop_all(replicas: list[Replica]) -> None:
    for r in replicas:
        if r.running:
            r.stop()


def test_three_replicas_elect_one_master_and_fail_over_to_an_in_sync_one(
    controller: ServiceProcess,
) -> None:
    addr = controller.endpoints["addr"]
    replicas = group_of(addr, "failover")
    try:
        for r in replicas:
            r.isr = [1, 2, 3]
            r.start()
        first = elected(addr, "failover", 1)
        old = replicas[first.master_id - 1]
        wait_for(
            lambda: group_state(addr, "failover").sync_state_set == [1, 2, 3],
            what="the master's in-sync set stored",
        )
        # every replica hears the same master; only it gets a write lease
        wait_for(lambda: all(len(r.beats) >= 3 for r in replicas), what="heartbeats")
        for r in replicas:
            reply = r.last_reply()
            assert isinstance(reply, ControllerHeartbeatReply), reply
            assert (reply.master_id, reply.epoch) == (old.rid, 1)
            assert (reply.lease_ms > 0) == (r is old)
        lease_ms = old.last_reply().lease_ms
        assert 0 < lease_ms < TIMEOUT_MS

        last_sent = old.stop()
        second = elected(addr, "failover", 2)
        took = time.monotonic() - last_sent
        print(f"failover: new master {took:.2f} s after the old master's last heartbeat")
        assert second.master_id != old.rid and second.master_id in (1, 2, 3)
        assert second.sync_state_set == [second.master_id]
        assert [e.epoch for e in second.epochs] == [1, 2]
        # never before the old master's write lease (counted from its send) ran out
        assert took > lease_ms / 1000
        assert took < FAILOVER_BOUND_S
        new = replicas[second.master_id - 1]
        wait_for(lambda: new.master and new.last_reply().lease_ms > 0, what="the new lease")
    finally:
        stop_all(replicas)


def test_an_out_of_sync_replica_never_wins_unless_unclean_election_is_allowed(
    etcd: EtcdProcess, controller: ServiceProcess
) -> None:
    addr = controller.endpoints["addr"]
    replicas = group_of(addr, "unclean")
    try:
        replicas[0].start()
        elected(addr, "unclean", 1)
        for r in replicas[1:]:
            r.start()
        replicas[0].isr = [1, 2]  # replica 3 has fallen behind
        wait_for(lambda: group_state(addr, "unclean").sync_state_set == [1, 2], what="isr")
        replicas[2].max_offset = 10**9  # the most data, but out of sync
        # the in-sync slave goes first, and the master beats once more after it, so the
        # slave's etcd lease lapses no later than the master's: stopped the other way round,
        # a slow stop of the master let its lease lapse while the slave still beat, and the
        # controller rightly elected the slave
        replicas[1].stop()
        slave_gone = time.monotonic()
        wait_for(
            lambda: (
                replicas[0].beats[-1].sent > slave_gone and replicas[0].last_reply() is not None
            ),
            what="a master heartbeat after the slave stopped",
        )
        replicas[0].stop()
        # the controller sees the master gone and nobody in sync alive, and elects nobody
        wait_for(
            lambda: any("unclean" in line and "no replica" in line for line in controller.output),
            timeout=FAILOVER_BOUND_S + 4,
            what="the controller finding no in-sync replica alive",
        )
        state = group_state(addr, "unclean")
        assert (state.master_id, state.epoch) == (1, 1)
        assert not replicas[2].master

        unclean = start_controller(etcd, "enableElectUncleanMaster=true")
        try:
            state = elected(unclean.endpoints["addr"], "unclean", 2)
            assert state.master_id == 3
            assert state.epochs[-1].start_offset == 10**9
            assert any("UNCLEAN" in line for line in unclean.output)
        finally:
            assert unclean.stop() == 0
    finally:
        stop_all(replicas)


def test_two_controllers_on_one_etcd_elect_exactly_once(
    etcd: EtcdProcess, controller: ServiceProcess
) -> None:
    # the second one through the mqcontroller alias (`ferry serve controller`)
    proc = subprocess.Popen(
        [str(BIN / "mqcontroller"), *controller_args(etcd)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    reader = LineReader(proc.stdout)
    replicas: list[Replica] = []
    try:
        ready = reader.wait_for_prefix("READY controller ")
        other = ready.split("addr=", 1)[1].split()[0]
        ours = controller.endpoints["addr"]
        replicas = group_of(ours, "twice")
        replicas[1].addr = other  # its heartbeats go to the other controller
        for r in replicas:
            r.isr = [1, 2, 3]
            r.start()
        first = elected(ours, "twice", 1)
        wait_for(lambda: group_state(other, "twice").sync_state_set == [1, 2, 3], what="isr")
        replicas[first.master_id - 1].stop()
        second = elected(other, "twice", 2)
        assert group_state(ours, "twice") == second
        # both scans saw the master gone; one transaction won
        wait_for(lambda: all(r.epoch == 2 for r in replicas if r.running), what="both hear epoch 2")
        assert [e.epoch for e in group_state(ours, "twice").epochs] == [1, 2]
        stop_all(replicas)
        proc.terminate()
        assert proc.wait(30) == 0
        lines = [*controller.output, *reader.lines, *reader.drain()]
        won = [ln for ln in lines if "twice: replica" in ln and "elected master, epoch 2" in ln]
        assert len(won) == 1, won
    finally:
        stop_all(replicas)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        reader.close()


def test_an_etcd_restart_keeps_the_state_and_fails_nobody_over(
    etcd: EtcdProcess, controller: ServiceProcess
) -> None:
    addr = controller.endpoints["addr"]
    replicas = group_of(addr, "restart")
    try:
        for r in replicas:
            r.isr = [1, 2, 3]
            r.start()
        elected(addr, "restart", 1)
        before = wait_for(
            lambda: (s := group_state(addr, "restart")).sync_state_set == [1, 2, 3] and s,
            what="isr",
        )
        etcd.kill()
        down_since = len(replicas[0].beats)
        # the controller answers, with a typed retriable error, and grants no lease
        refused = wait_for(
            lambda: next(
                (
                    b.reply
                    for b in replicas[0].beats[down_since:]
                    if isinstance(b.reply, ErrorReply)
                ),
                None,
            ),
            what="a heartbeat refused while etcd is down",
        )
        assert (refused.code, refused.retriable) == (2007, True)  # CONTROLLER_NOT_LEADER
        assert isinstance(call(addr, PingRequest()), PongReply)
        etcd.start()
        wait_answered_again(replicas)
        # a whole heartbeat timeout and two scans later, the same master, epoch and set
        watch_until = time.monotonic() + TIMEOUT_MS / 1000 + 2 * SCAN_MS / 1000
        while time.monotonic() < watch_until:
            now = group_state(addr, "restart")
            assert (now.master_id, now.epoch, now.sync_state_set) == (
                before.master_id,
                1,
                [1, 2, 3],
            )
            time.sleep(0.1)  # wait-ok: sampling the state over a window where nothing may change
        master = replicas[before.master_id - 1]
        assert master.master and master.last_reply().lease_ms > 0
    finally:
        stop_all(replicas)


def admin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ferry"), "admin", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_admin_commands(controller: ServiceProcess) -> None:
    addr = controller.endpoints["addr"]
    replicas = group_of(addr, "admin")
    try:
        replicas[0].start()
        elected(addr, "admin", 1)
        replicas[0].isr = [1, 2]
        for r in replicas[1:]:
            r.start()
        wait_for(lambda: group_state(addr, "admin").sync_state_set == [1, 2], what="isr")

        out = admin("getSyncStateSet", "-a", addr, "-b", "admin", "--json")
        assert out.returncode == 0, out.stderr
        [group] = json.loads(out.stdout)
        assert (group["master_id"], group["epoch"], group["sync_state_set"]) == (1, 1, [1, 2])
        assert [r["replica_id"] for r in group["replicas"]] == [1, 2, 3]
        table = admin("getSyncStateSet", "-a", addr, "-c", CLUSTER)
        assert table.returncode == 0, table.stderr
        assert "C/admin" in table.stdout and replicas[1].broker_addr in table.stdout

        meta = admin("getControllerMetaData", "-a", addr, "--json")
        assert meta.returncode == 0, meta.stderr
        info = json.loads(meta.stdout)
        assert info["addr"] == addr and addr in info["controllers"]
        assert info["etcd_reachable"] is True and info["etcd_version"].startswith("3.4")

        # an out-of-sync replica is refused; an in-sync one takes over once the live master's
        # lease has run out
        refused = admin("electMaster", "-a", addr, "-c", CLUSTER, "-n", "admin", "-b", "3")
        assert refused.returncode != 0
        assert "sync state set" in refused.stderr
        switched = admin(
            "electMaster", "-a", addr, "-c", CLUSTER, "-n", "admin",
            "-b", replicas[1].broker_addr, "--json",
        )  # fmt: skip
        assert switched.returncode == 0, switched.stderr
        assert json.loads(switched.stdout)[0]["master_id"] == 2
        state = group_state(addr, "admin")
        assert (state.master_id, state.epoch, state.handover_to) == (2, 2, 0)
        wait_for(lambda: replicas[0].epoch == 2 and not replicas[0].master, what="old demoted")
        assert replicas[0].last_reply().lease_ms == 0

        # the live master is never cleaned; a live replica only with --cleanLivingBroker
        master = admin("cleanBrokerMetadata", "-a", addr, "-c", CLUSTER, "-b", "admin",
                       "--brokerControllerIdsToClean", "2", "--cleanLivingBroker")  # fmt: skip
        assert master.returncode != 0 and "live master" in master.stderr
        living = admin("cleanBrokerMetadata", "-a", addr, "-c", CLUSTER, "-b", "admin",
                       "--brokerControllerIdsToClean", "3")  # fmt: skip
        assert living.returncode != 0 and "--cleanLivingBroker" in living.stderr
        replicas[2].stop()
        wait_for(
            lambda: not group_state(addr, "admin").replicas[2].alive,
            timeout=FAILOVER_BOUND_S,
            what="replica 3's lease lapsed",
        )
        cleaned = admin("cleanBrokerMetadata", "-a", addr, "-c", CLUSTER, "-b", "admin",
                        "--brokerControllerIdsToClean", "3", "--json")  # fmt: skip
        assert cleaned.returncode == 0, cleaned.stderr
        assert json.loads(cleaned.stdout)["cleaned"] == [3]
        assert [r.replica_id for r in group_state(addr, "admin").replicas] == [1, 2]
    finally:
        stop_all(replicas)


def test_a_hung_etcd_gets_brokers_a_typed_error_in_bounded_time(
    etcd: EtcdProcess, controller: ServiceProcess
) -> None:
    addr = controller.endpoints["addr"]
    replicas = group_of(addr, "hung")
    try:
        for r in replicas:
            r.start()
        elected(addr, "hung", 1)
        os.kill(etcd.pid, signal.SIGSTOP)  # etcd answers nothing, and refuses nothing
        try:
            began = time.monotonic()
            reply = call(replicas[0].addr, ControllerGetSyncStateDataRequest(), timeout_ms=10_000)
            took = time.monotonic() - began
            assert isinstance(reply, ErrorReply) and (reply.code, reply.retriable) == (2007, True)
            assert took < 3.0, f"{took:.1f} s for an answer while etcd hangs"
            # the loop itself never waits on etcd
            began = time.monotonic()
            assert isinstance(call(addr, PingRequest()), PongReply)
            assert time.monotonic() - began < 0.5
        finally:
            os.kill(etcd.pid, signal.SIGCONT)
        wait_answered_again(replicas)
        assert controller.alive()
    finally:
        stop_all(replicas)


CONTROLLER_TYPES = (
    PingRequest,
    ControllerRegisterBrokerRequest,
    ControllerHeartbeatRequest,
    ControllerGetSyncStateDataRequest,
    ControllerGetMetadataRequest,
    ControllerElectMasterRequest,
    ControllerCleanBrokerDataRequest,
)


def test_fuzzed_requests_never_crash_the_controller(controller: ServiceProcess) -> None:
    """Every controller request, data-changing ones too (their groups are the fuzzer's own
    names), with generated values: each answered or refused with a typed error, never an
    internal error, and a ping after each is answered."""
    target = ZmqTarget("controller", controller.endpoints["addr"])
    try:
        frames = st.one_of(any_frames(CONTROLLER_TYPES), well_formed(CONTROLLER_TYPES))
        fed = drive(target.feed, frames, budget_s=4.0, max_examples=2000)
        assert target.ping(), "no answer after the run"
    finally:
        target.close()
    findings = "\n".join(str(f) for f in target.tally.findings[:10])
    assert not target.tally.findings, findings
    assert fed >= 50, f"only {fed} frames"
    assert target.tally.errors > 0 and target.tally.replies > 0
    assert controller.alive()
