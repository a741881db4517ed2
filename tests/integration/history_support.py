"""Records a failover History (history_check) on a ControlledGroup (failover_support): two
producers and two consumer groups run through a seeded schedule of faults (nemeses) while
every send, every delivery and the controller's view are recorded (and, at each pause of a
master, the sends of a producer whose route still names it); at the end every replica's log
is read for the checker."""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import failover_support
import zmq
from failover_support import ControlledGroup, Replica, ha_applied, ha_end, start_group
from ha_support import broker_ids
from history_check import (
    FAILED,
    GROUPS,
    OK,
    TIMEOUT,
    Delivery,
    Entry,
    Fault,
    History,
    Sample,
    Send,
)
from itest_support import wait_for

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    ConsumeResult,
    FerryError,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    RequestTimeoutError,
    SendStatus,
)
from ferry.protocol import record
from ferry.protocol.codes import PullStatus, ResponseCode
from ferry.protocol.messages import (
    ControllerGetSyncStateDataRequest,
    ControllerSyncStateDataReply,
    ErrorReply,
    GetRouteInfoRequest,
    PingRequest,
    PullMessageReply,
    PullMessageRequest,
    RouteInfoReply,
    SendMessageReply,
    SendMessageRequest,
)
from ferry.protocol.messages.controller import BrokerGroupState
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.launcher import service_args, start_service

# ---- recording a History on a live group ------------------------------------------------------

TOPIC = "History"
QUEUES = 4
PACE_S = 0.005  # between a producer's sends: enough traffic without starving the 2 cores
SETTLE_S = 60.0


def lease_s() -> float:
    """The brokers' write lease (broker_agent): heartbeat timeout minus max(500 ms, 1/5)."""
    timeout = failover_support.HEARTBEAT_TIMEOUT_MS
    return (timeout - max(500, timeout / 5)) / 1000


def timeout_s() -> float:
    return failover_support.HEARTBEAT_TIMEOUT_MS / 1000


def until(predicate: Callable[[], Any], timeout: float) -> bool:
    """wait_for without failing: False at the deadline (the history notes it)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # wait-ok: polling interval of a deadline-bounded wait
    return True


class Wire:
    """Requests from one thread to any address, a socket each, with a timeout (None)."""

    def __init__(self) -> None:
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._clients: dict[str, BlockingClient] = {}

    def call(
        self, addr: str, body: Any, timeout_ms: int = 1000, payload: list[bytes] | None = None
    ) -> tuple[Any, list[Any]] | None:
        client = self._clients.get(addr)
        if client is None:
            client = self._clients[addr] = BlockingClient(f"tcp://{addr}", self._ctx)
        return client.call(body, timeout_ms, payload)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._ctx.term()


def controller_state(wire: Wire, group: ControlledGroup) -> BrokerGroupState | None:
    request = ControllerGetSyncStateDataRequest(broker_names=[group.broker_name])
    answer = wire.call(group.controller_addr, request)
    if answer is None or not isinstance(answer[0], ControllerSyncStateDataReply):
        return None  # etcd restarting, or the controller busy: ask again later
    return next((g for g in answer[0].groups if g.broker_name == group.broker_name), None)


def routed_addrs(wire: Wire, group: ControlledGroup) -> dict[int, str]:
    """broker id -> address, as the name server routes the topic (empty on no answer)."""
    answer = wire.call(group.namesrv_addr, GetRouteInfoRequest(TOPIC))
    if answer is None or not isinstance(answer[0], RouteInfoReply):
        return {}
    for data in answer[0].route.broker_datas:
        if data.broker_name == group.broker_name:
            return dict(data.broker_addrs)
    return {}


def pull(wire: Wire, addr: str, group: str, queue_id: int, offset: int) -> tuple[Any, list[Any]]:
    """(reply, records) of one pull; (None, []) on no answer or an error reply."""
    answer = wire.call(addr, PullMessageRequest(group, TOPIC, queue_id, offset, 256), 2000)
    if answer is None or not isinstance(answer[0], PullMessageReply):
        return None, []
    reply, frames = answer
    found = reply.status == PullStatus.FOUND
    records = [r for f in frames for r in record.iter_records(bytes(f))] if found else []
    return reply, records


class Recorder:
    """Two producers, a push consumer group, a group pulling from the routed slaves and a
    sampler of the controller, each on a thread of its own, appending to one History."""

    def __init__(self, group: ControlledGroup, history: History) -> None:
        self.group = group
        self.history = history
        self._stop_sends = threading.Event()
        self._stop = threading.Event()
        namesrv = group.namesrv_addr  # a name server restart keeps its port
        self._producers = [
            Producer(f"pg-history-{n}", namesrv, send_timeout_ms=3000) for n in ("p1", "p2")
        ]
        self._push = PushConsumer(
            "cg-history-push",
            namesrv,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
            consume_thread_nums=4,
        )
        self._push.subscribe(TOPIC)
        self._push.register_listener(self._on_push)
        self._threads = [
            threading.Thread(target=self._sample, daemon=True),
            threading.Thread(target=self._pull_slaves, daemon=True),
        ]
        self._senders = [
            threading.Thread(target=self._produce, args=(p, f"p{i}"), daemon=True)
            for i, p in enumerate(self._producers, 1)
        ]

    def start(self) -> None:
        for producer in self._producers:
            producer.start()
        self._push.start()
        for thread in [*self._threads, *self._senders]:
            thread.start()

    def stop_sends(self) -> None:
        if self._stop_sends.is_set():
            return
        self._stop_sends.set()
        for thread in self._senders:
            thread.join(30)
        for producer in self._producers:
            producer.shutdown()

    def stop(self) -> None:
        self.stop_sends()
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        self._push.shutdown()

    def _produce(self, producer: Producer, name: str) -> None:
        i = 0
        while not self._stop_sends.is_set():
            body = f"{name}-{i}".encode()
            i += 1
            started = time.monotonic()
            try:
                result = producer.send(Message(TOPIC, body))
            except RequestTimeoutError as err:
                self._record(
                    Send(name, body, started, time.monotonic(), TIMEOUT, type(err).__name__)
                )
            except FerryError as err:
                self._record(
                    Send(name, body, started, time.monotonic(), FAILED, type(err).__name__)
                )
            else:
                ok = result.status == SendStatus.SEND_OK
                addr = record.decode_offset_msg_id(result.offset_msg_id)[0]
                self._record(
                    Send(
                        name,
                        body,
                        started,
                        time.monotonic(),
                        OK if ok else FAILED,
                        "" if ok else result.status.name,
                        result.queue.queue_id,
                        result.queue_offset,
                        addr,
                    )
                )
            time.sleep(PACE_S)  # wait-ok: pacing of the traffic, not a readiness wait

    def _record(self, send: Send) -> None:
        self.history.sends.append(send)  # list.append is atomic: no lock

    def _on_push(self, msgs: list[MessageExt]) -> ConsumeResult:
        now = time.monotonic()
        for m in msgs:
            self.history.deliveries.append(
                Delivery("push", m.body, m.queue.queue_id, m.queue_offset, now, m.store_host)
            )
        return ConsumeResult.SUCCESS

    def _pull_slaves(self) -> None:
        """A pull consumer group reading from slaves: the SDK reads from a slave only while the
        master is gone, so this pulls straight from the ids the route gives besides 0 (the
        master when there is none), from each queue's next offset. Queue q stays on slave
        q % slaves (as a RocketMQ consumer stays on its suggested slave): a slave that serves
        less than it holds shows as lost messages, not hidden by the other one."""
        wire = Wire()
        offsets = [0] * QUEUES
        addrs: list[str] = []
        routed_at = 0.0
        try:
            while not self._stop.is_set():
                if time.monotonic() - routed_at > 1.0:
                    route = routed_addrs(wire, self.group)
                    slaves = [a for i, a in sorted(route.items()) if i != 0]
                    addrs = slaves or list(route.values()) or addrs
                    routed_at = time.monotonic()
                found = 0
                for qid in range(QUEUES):
                    if not addrs:
                        break
                    addr = addrs[qid % len(addrs)]
                    reply, records = pull(wire, addr, "cg-history-slave", qid, offsets[qid])
                    now = time.monotonic()
                    for r in records:
                        self.history.deliveries.append(
                            Delivery(
                                "slave-pull",
                                r.body,
                                r.queue_id,
                                r.queue_offset,
                                now,
                                r.store_host,
                                addr,
                            )
                        )
                    if records:  # a lagging slave's OFFSET_ILLEGAL keeps the offset
                        offsets[qid] = reply.next_begin_offset
                        found += len(records)
                if not found:
                    time.sleep(0.05)  # wait-ok: the poll interval of an idle pull loop
        finally:
            wire.close()

    def _sample(self) -> None:
        wire = Wire()
        try:
            while not self._stop.is_set():
                at = time.monotonic()
                state = controller_state(wire, self.group)
                routed = routed_addrs(wire, self.group).get(0, "")
                if state is None:
                    self.history.samples.append(Sample(at, -1, 0, (), routed))
                else:
                    in_sync = tuple(sorted(state.sync_state_set))
                    self.history.samples.append(
                        Sample(at, state.epoch, state.master_id, in_sync, routed)
                    )
                self._stop.wait(0.1)
        finally:
            wire.close()


# ---- nemeses -----------------------------------------------------------------------------------

KINDS = (
    "kill-restart",  # kill -9 of the master's tree, started again at once (within the lease)
    "kill-failover",  # kill -9 of the master's tree, started again past the heartbeat timeout
    "pause-short",  # SIGSTOP of the master's tree for less than the lease
    "pause-long",  # SIGSTOP of the master's tree past the heartbeat timeout (2 to 2.5 times)
    "pause-slave",  # SIGSTOP of a slave's tree
    "etcd-restart",
    "namesrv-restart",  # on the same port: clients and brokers keep its address
)


def failover_summary(history: History) -> str:
    """min / median / max of the failover times, by fault kind."""
    by_kind: dict[str, list[float]] = defaultdict(list)
    never: Counter[str] = Counter()
    for fault, took in history.failover_times():
        if took is None:
            never[fault.kind] += 1
        else:
            by_kind[fault.kind].append(took)
    lines = [f"{'fault':<16}{'n':>4}{'min':>8}{'median':>8}{'max':>8}  never"]
    for kind in KINDS:
        times = by_kind.get(kind, [])
        if not times and not never[kind]:
            continue
        if times:
            figures = f"{min(times):>7.2f}s{statistics.median(times):>7.2f}s{max(times):>7.2f}s"
        else:
            figures = f"{'-':>8}{'-':>8}{'-':>8}"
        lines.append(f"{kind:<16}{len(times) + never[kind]:>4}{figures}  {never[kind]}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Step:
    kind: str
    hold_s: float  # how long the fault is held
    pick: float  # in [0, 1): which slave, for pause-slave
    quiet_s: float  # traffic alone after the settle


def schedule(seed: int, steps: int) -> list[Step]:
    """`steps` faults drawn from random.Random(seed), every kind once first (shuffled), all
    figures drawn up front and step by step: the schedule depends on the seed alone, and a
    longer one begins with a shorter one's steps."""
    holds = {
        "kill-restart": (0.0, 0.0),
        "kill-failover": (1.5 * timeout_s(), 2.5 * timeout_s()),
        "pause-short": (0.2 * lease_s(), 0.6 * lease_s()),
        "pause-long": (2.0 * timeout_s(), 2.5 * timeout_s()),
        "pause-slave": (0.5 * timeout_s(), 2.0 * timeout_s()),
        "etcd-restart": (0.0, timeout_s()),
        "namesrv-restart": (0.0, timeout_s()),
    }
    rng = random.Random(seed)
    first = rng.sample(KINDS, len(KINDS))
    out: list[Step] = []
    for i in range(steps):
        kind = first[i] if i < len(first) else rng.choice(KINDS)
        out.append(Step(kind, rng.uniform(*holds[kind]), rng.random(), rng.uniform(0.5, 1.5)))
    return out


class Nemesis:
    """Injects a Step's fault into the group, holds it, heals it, and settles."""

    def __init__(self, group: ControlledGroup, history: History) -> None:
        self.group = group
        self.history = history
        self.wire = Wire()
        self.note_addrs()

    def note_addrs(self) -> None:
        for replica in self.group.replicas.values():
            self.history.addrs[replica.addr] = replica.replica_id

    def find_master(self) -> Replica | None:
        """The live replica the controller names master, if any."""
        state = controller_state(self.wire, self.group)
        replica = self.group.replicas.get(state.master_id) if state is not None else None
        return replica if replica is not None and replica.proc.poll() is None else None

    def master(self) -> Replica:
        found: Replica = wait_for(self.find_master, 30, "the controller's master")
        return found

    def run(self, step: Step) -> Fault:
        start: dict[str, Callable[[Step], Fault]] = {
            "kill-restart": self._kill,
            "kill-failover": self._kill,
            "pause-short": self._pause_master,
            "pause-long": self._pause_master,
            "pause-slave": self._pause_slave,
            "etcd-restart": self._restart_etcd,
            "namesrv-restart": self._restart_namesrv,
        }
        fault = start[step.kind](step)
        self.history.faults.append(fault)
        return fault

    def hold(self, step: Step, share: float = 1.0) -> None:
        if step.hold_s:
            time.sleep(step.hold_s * share)  # wait-ok: the fault is held for the drawn duration

    def _kill(self, step: Step) -> Fault:
        master = self.master()
        at = time.monotonic()
        master.kill_tree()
        self.hold(step)
        self.group.start_replica(master.replica_id)
        self.note_addrs()
        return replica_fault(step, master, at)

    def _pause_master(self, step: Step) -> Fault:
        master = self.master()
        slow = SlowSends(master.addr, f"slow{len(self.history.faults) + 1}")
        gap = 0.0005 + step.pick * 0.002  # about a store append or its replication
        for tag in "abcd":  # bursts of two, some mid-way through their handling at the SIGSTOP
            slow.send(tag, 2)
            time.sleep(gap)  # wait-ok: the SIGSTOP lands a drawn moment after the sends
        at = time.monotonic()
        master.pause_tree()
        try:
            self.hold(step, 0.5)
            slow.send("e", 4)  # half-way through the pause
            self.hold(step, 0.5)
        finally:
            master.resume_tree()
        self.history.sends.extend(slow.collect())
        return replica_fault(step, master, at)

    def _pause_slave(self, step: Step) -> Fault:
        slaves = sorted(self.group.others(self.master()), key=lambda r: r.replica_id)
        slave = slaves[int(step.pick * len(slaves))]
        at = time.monotonic()
        slave.pause_tree()
        try:
            self.hold(step)
        finally:
            slave.resume_tree()
        return replica_fault(step, slave, at)

    def _restart_etcd(self, step: Step) -> Fault:
        at = time.monotonic()
        self.group.etcd.stop()
        self.hold(step)
        self.group.etcd.start()  # the same data dir and ports
        return Fault(step.kind, "etcd", at, time.monotonic(), step.hold_s)

    def _restart_namesrv(self, step: Step) -> Fault:
        port = self.group.namesrv_addr.rsplit(":", 1)[1]
        at = time.monotonic()
        self.group.namesrv.stop()
        self.hold(step)
        self.group.namesrv = start_service("namesrv", service_args(None, {"listenPort": port}))
        return Fault(step.kind, "namesrv", at, time.monotonic(), step.hold_s)

    def settle(self, fault: Fault) -> bool:
        """A routed master, a slave in sync, a write acknowledged since the fault, and the
        faulted replica back (a slave unless it is the master): False, noted, at a deadline."""
        checks: list[tuple[str, Callable[[], bool]]] = [
            ("routed master", self.routed_master),
            ("slave in sync", self.slave_in_sync),
            ("ack of a send begun after the fault", lambda: self.acked_since(fault.at)),
        ]
        if fault.replica:
            checks.append(("faulted replica back", lambda: self.back(fault.replica)))
        for what, check in checks:
            if not until(check, SETTLE_S):
                self.history.notes.append(
                    f"after {fault.kind} of {fault.target} at {self.history.t(fault.at)}: "
                    f"no {what} within {SETTLE_S:.0f} s"
                )
                return False
        return True

    def routed_master(self) -> bool:
        replica = self.find_master()
        return replica is not None and routed_addrs(self.wire, self.group).get(0) == replica.addr

    def slave_in_sync(self) -> bool:
        state = controller_state(self.wire, self.group)
        if state is None:
            return False
        live = {i for i, r in self.group.replicas.items() if r.proc.poll() is None}
        return len(set(state.sync_state_set) & live) >= 2

    def acked_since(self, at: float) -> bool:
        for s in reversed(self.history.sends):  # appended as they end
            if s.finished < at:
                return False
            if s.outcome == OK and s.started >= at:
                return True
        return False

    def back(self, replica_id: int) -> bool:
        replica = self.group.replicas[replica_id]
        if replica.proc.poll() is not None:
            return False
        state = controller_state(self.wire, self.group)
        if state is not None and state.master_id == replica_id:
            return True
        return replica.last_role() == "slave"

    def close(self) -> None:
        self.wire.close()


# ---- a whole run -------------------------------------------------------------------------------


class SlowSends:
    """Sends of a producer whose route still names a replica about to be paused and whose
    timeout outlasts the pause: bursts just before the SIGSTOP (caught mid-way through their
    handling) and during it (waiting in the replica's socket buffers: the sockets connected
    while it ran), all answered, or not, once it resumes. A socket a send, so that each
    answer is waited for on its own."""

    def __init__(self, addr: str, name: str, count: int = 12) -> None:
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._addr = addr
        self._name = name
        self._clients: list[BlockingClient] = []
        self._sent: list[tuple[BlockingClient, int, bytes, float]] = []
        self._spare = [self._connected() for _ in range(count)]

    def _connected(self) -> BlockingClient:
        client = BlockingClient(f"tcp://{self._addr}", self._ctx)
        self._clients.append(client)
        client.call(PingRequest(), 2000)  # a round trip: the connection is up before the stop
        return client

    def send(self, tag: str, count: int) -> None:
        for i in range(count):
            client = self._spare.pop()
            body = f"{self._name}{tag}-{i}".encode()
            rec = record.encode_record(TOPIC.encode(), body, record.encode_properties({}))
            rid = client.send(SendMessageRequest(self._name, TOPIC, -1), [rec])
            self._sent.append((client, rid, body, time.monotonic()))

    def collect(self, timeout_ms: int = 5000) -> list[Send]:
        """Each send's answer (a Send of producer `name`), waiting up to timeout_ms in all."""
        out: list[Send] = []
        deadline = time.monotonic() + timeout_ms / 1000
        for client, rid, body, started in self._sent:
            left = max(1.0, (deadline - time.monotonic()) * 1000)
            answer = client.receive(rid, left)
            out.append(answered(self._name, body, started, answer))
        for client in self._clients:
            client.close()
        self._ctx.term()
        return out


def answered(name: str, body: bytes, started: float, answer: tuple[Any, Any] | None) -> Send:
    """A raw send's outcome as a Send."""
    finished = time.monotonic()
    reply = None if answer is None else answer[0]
    if isinstance(reply, SendMessageReply):
        status = SendStatus(reply.status)
        outcome, error = (OK, "") if status == SendStatus.SEND_OK else (FAILED, status.name)
        where = (reply.queue_id, reply.queue_offset, reply.store_host)
        return Send(name, body, started, finished, outcome, error, *where)
    if isinstance(reply, ErrorReply):
        known = reply.code in {c.value for c in ResponseCode}
        code = ResponseCode(reply.code).name if known else reply.code
        return Send(name, body, started, finished, FAILED, f"ErrorReply {code}")
    return Send(name, body, started, finished, TIMEOUT, "no answer")


def replica_fault(step: Step, replica: Replica, at: float) -> Fault:
    target = f"replica {replica.replica_id}"
    return Fault(step.kind, target, at, time.monotonic(), step.hold_s, replica.replica_id)


def read_log(wire: Wire, replica: Replica) -> list[Entry] | None:
    """Every record of the topic in the replica's log, each queue from offset 0; None when
    the replica does not answer."""
    out: list[Entry] = []
    for qid in range(QUEUES):
        offset = 0
        while True:
            reply, records = pull(wire, replica.addr, "cg-history-final", qid, offset)
            if reply is None:
                return None
            out.extend(
                Entry(replica.replica_id, r.queue_id, r.queue_offset, r.body, r.store_host)
                for r in records
            )
            moved = reply.next_begin_offset > offset
            if not moved or reply.status not in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
                break
            offset = reply.next_begin_offset
    return out


def drain(history: History, timeout: float = 60.0) -> None:
    """Until both groups got every acknowledged message, or the deadline: longer than the
    SDK's route poll (30 s) and rebalance (20 s), so that a consumer left on a stale route
    has come back before what it lacks is called lost."""
    acked = {s.body for s in history.acks()}
    until(lambda: all(acked <= history.delivered(g) for g in GROUPS), timeout)


def holds(replica: Replica, end: int) -> bool:
    return ha_applied(replica) == end


def served(nemesis: Nemesis, replica: Replica, at_least: int) -> list[Entry] | None:
    """The replica's log once it serves `at_least` records (or at a deadline, noted)."""
    log: list[Entry] | None = None

    def enough() -> bool:
        nonlocal log
        log = read_log(nemesis.wire, replica)
        return log is not None and len(log) >= at_least

    if not until(enough, 30):
        got = "no answer" if log is None else f"{len(log)} records"
        nemesis.history.notes.append(
            f"replica {replica.replica_id} served {got} of the master's {at_least}"
            " 30 s after its ha-replicator held the master's end"
        )
    return log


def read_final_logs(nemesis: Nemesis) -> None:
    """The controller's master and every live replica's log, once the slaves hold the
    master's log end (or at a deadline, noted)."""
    group, history = nemesis.group, nemesis.history
    if not until(nemesis.find_master, 30):
        history.notes.append("no master at the end: no final log")
        return
    master = nemesis.master()
    live = [r for r in group.replicas.values() if r.proc.poll() is None]
    end = 0

    def master_end() -> int:
        nonlocal end
        end = ha_end(master) or 0
        return end

    if not until(master_end, 30):
        history.notes.append(f"replica {master.replica_id}, the master, gave no log end")
    for replica in live:
        if replica is not master and not until(partial(holds, replica, end), 30):
            history.notes.append(f"replica {replica.replica_id} did not reach the master's end")
    history.master = master.replica_id
    final = served(nemesis, master, 0)
    for replica in live:
        log = final if replica is master else served(nemesis, replica, len(final or []))
        if log is not None:
            history.logs[replica.replica_id] = log


def run_history(
    root: Path,
    seed: int,
    steps: int,
    duration_s: float = 0.0,
    say: Callable[[str], None] = print,
) -> History:
    """Starts a group of three replicas (default broker settings), records traffic through
    `steps` faults of the seed's schedule (stopping early after duration_s, if given, or at a
    settle that missed its deadline), then reads the final logs."""
    group = start_group(root)
    history = History(seed=seed)
    try:
        nemesis = Nemesis(group, history)
        try:
            nemesis.master()
            wait_for(lambda: 0 in broker_ids(group.namesrv_addr), 30, "the master routed")
            with Admin(group.namesrv_addr) as admin:
                admin.create_topic(TOPIC, QUEUES, QUEUES)
            wait_for(lambda: failover_support.topic_on_replicas(group, TOPIC), 30, "the topic")
            wait_for(nemesis.routed_master, 30, "the topic routed to the master")
            wait_for(nemesis.slave_in_sync, 60, "a slave in sync")
            history.started = time.monotonic()
            recorder = Recorder(group, history)
            recorder.start()
            try:
                wait_for(lambda: len(history.acks()) > 20, 30, "steady traffic")
                run_steps(nemesis, schedule(seed, steps), duration_s, say)
                recorder.stop_sends()
                drain(history)
            finally:
                recorder.stop()
            read_final_logs(nemesis)
            history.ended = time.monotonic()
        finally:
            nemesis.close()
    finally:
        group.close()
    return history


def run_steps(
    nemesis: Nemesis, steps: Iterable[Step], duration_s: float, say: Callable[[str], None]
) -> None:
    history = nemesis.history
    for i, step in enumerate(steps, 1):
        if duration_s and time.monotonic() - history.started > duration_s:
            say(f"duration of {duration_s:.0f} s reached after {i - 1} steps")
            return
        fault = nemesis.run(step)
        settled = nemesis.settle(fault)
        say(
            f"step {i}: {fault.kind} of {fault.target} at {history.t(fault.at)}, "
            f"held {fault.hold_s:.1f} s, settled {time.monotonic() - fault.healed:.1f} s later"
            + ("" if settled else f" -- UNSETTLED: {history.notes[-1]}")
        )
        if not settled:
            return
        time.sleep(step.quiet_s)  # wait-ok: traffic alone between faults, a drawn duration
