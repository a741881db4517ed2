"""Controller mode as the failover tests run it: a private etcd, a controller, a name server,
and broker replicas of one group, each a `ferry serve broker` process tree in a session of its
own, so that killing or pausing the tree models losing one machine."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from ha_support import status
from itest_support import FERRY, LineReader, RawClient, wait_for

from ferry.client import (
    BrokerNotExistError,
    ConsumeFromWhere,
    FerryError,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    SendResult,
    SendStatus,
)
from ferry.protocol import record
from ferry.protocol.messages import (
    ControllerGetSyncStateDataRequest,
    ControllerSyncStateDataReply,
    ErrorReply,
    GetAllTopicConfigRequest,
    GetRouteInfoRequest,
    GetTopicStatsRequest,
    HaStatusReply,
    HaStatusRequest,
    PullMessageRequest,
    RouteInfoReply,
    SendMessageRequest,
    TopicConfigListReply,
)
from ferry.protocol.messages.controller import BrokerGroupState
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.etcd import EtcdProcess, start_etcd
from ferry.runtime.launcher import ServiceProcess, service_args, start_controller, start_service

FAST_POLICY = "first_wait=0.1,max_wait=1,max_crashes=10,window=60"
HEARTBEAT_TIMEOUT_MS = 3000  # the controller's: a master silent this long is replaced
# What a group must run with for "nothing acknowledged is lost" across failovers. Without
# allAckInSyncStateSet a SYNC_MASTER answers SEND_OK once any one slave acked (as RocketMQ),
# while the controller elects among the in-sync set by the offsets the replicas last reported:
# a send acked by a slave that is not elected (outside the set, or ahead of the one that wins)
# is cut from every log once the group follows the new master.
NO_LOSS = {"allAckInSyncStateSet": "true"}


class Replica:
    """One `ferry serve broker` tree of broker-a in controller mode."""

    def __init__(
        self,
        root: Path,
        replica_id: int,
        controller: str,
        namesrv: str,
        extra: dict[str, str] | None = None,
    ) -> None:
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
            **(extra or {}),
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

    def service_pid(self, module: str) -> int:
        """The pid of the tree's process running `python -m <module>` (e.g. ferry.ha)."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                pgid = os.getpgid(int(entry.name))
            except (OSError, ProcessLookupError):
                continue  # gone meanwhile
            if pgid == self.proc.pid and module.encode() in argv:
                return int(entry.name)
        raise LookupError(f"no {module} process in replica {self.replica_id}'s tree")

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
    settings: dict[str, str] = field(default_factory=dict)  # broker.conf keys for every replica
    # False for a second group on the first one's etcd, controller and name server (add_group)
    owns_services: bool = True

    @property
    def broker_name(self) -> str:
        return self.settings.get("brokerName", "broker-a")

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
            self.root / f"replica-{replica_id}",
            replica_id,
            self.controller_addr,
            self.namesrv_addr,
            self.settings,
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
        if not self.owns_services:
            return
        self.namesrv.stop()
        self.controller.stop()
        self.etcd.stop()


def ha_status(replica: Replica) -> HaStatusReply | None:
    """Its ha-replicator's status; None when none comes within 5 s, for wait_for to ask again:
    a role change restarts the service, and what the old process took is never answered."""
    client = RawClient(replica.ha_addr)
    try:
        reply = client.try_call(HaStatusRequest(), 5000)
    finally:
        client.close()
    return reply if isinstance(reply, HaStatusReply) else None


def ha_end(replica: Replica) -> int | None:
    """A master's log end as its ha-replicator reports it."""
    reply = ha_status(replica)
    if reply is not None and reply.role != "SLAVE":
        return reply.master_max_offset or None
    return None


def ha_applied(replica: Replica) -> int | None:
    """How far a slave's log holds its master's."""
    reply = ha_status(replica)
    if reply is not None and reply.role == "SLAVE":
        return reply.applied_offset
    return None


def _last_role(replica: Replica) -> str:
    for line in reversed(replica.reader.take()):
        if "[agent] elected master" in line:
            return "master"
        if "[agent] slave of replica" in line:
            return "slave"
    return ""


def start_group(
    root: Path, replicas: int = 3, settings: dict[str, str] | None = None
) -> ControlledGroup:
    etcd = start_etcd(root / "etcd")
    controller = namesrv = None
    try:
        controller = start_controller(etcd.endpoint, HEARTBEAT_TIMEOUT_MS, scan_ms=200)
        namesrv = start_service("namesrv", service_args(None, {"listenPort": "0"}))
        group = ControlledGroup(etcd, controller, namesrv, root, settings=dict(settings or {}))
        for replica_id in range(1, replicas + 1):
            group.start_replica(replica_id)
        return group
    except BaseException:
        for sp in (namesrv, controller):
            if sp is not None:
                sp.stop()
        etcd.stop()
        raise


def add_group(
    first: ControlledGroup,
    broker_name: str,
    replicas: int = 3,
    settings: dict[str, str] | None = None,
) -> ControlledGroup:
    """Another broker group of the cluster, on `first`'s etcd, controller and name server
    (which `first.close()` stops; this group's close() stops only its replicas)."""
    group = ControlledGroup(
        first.etcd,
        first.controller,
        first.namesrv,
        first.root / broker_name,
        settings={**(settings or {}), "brokerName": broker_name},
        owns_services=False,
    )
    try:
        for replica_id in range(1, replicas + 1):
            group.start_replica(replica_id)
    except BaseException:
        group.close()
        raise
    return group


class Ack(NamedTuple):
    """One SEND_OK of Traffic: when it came (time.monotonic()), from which broker group, for
    which body, when its send began, and the queue id it named."""

    at: float
    broker: str
    body: bytes
    started: float
    queue_id: int


class Traffic:
    """A producer sending without pause and a consumer group reading, on their own threads:
    what was acknowledged (and when, on which broker group), what failed (by error type),
    what was delivered. `only_broker`: every send goes to that broker group's queues (a
    selector) and nothing is consumed; `name` keeps two at once apart."""

    def __init__(
        self,
        namesrv: str,
        topic: str = "Failover",
        name: str = "rounds",
        only_broker: str = "",
    ) -> None:
        self.topic = topic
        self.only_broker = only_broker
        self.acked: list[bytes] = []
        self.acks: list[Ack] = []
        self.failed: dict[str, int] = {}
        self.delivered: set[bytes] = set()
        self._stop = threading.Event()
        self._producer = Producer(f"pg-{name}", namesrv, send_timeout_ms=3000)
        self._consumer = None
        self._threads = [threading.Thread(target=self._produce, daemon=True)]
        if not only_broker:
            self._consumer = PullConsumer(
                f"cg-{name}", namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
            )
            self._threads.append(threading.Thread(target=self._consume, daemon=True))

    def start(self) -> None:
        self._producer.start()
        if self._consumer is not None:  # started: a PullConsumer never started polls nothing
            self._consumer.start()
            self._consumer.subscribe(self.topic)
        for thread in self._threads:
            thread.start()

    def _pick(self, queues: list[MessageQueue], _msg: Message, i: int) -> MessageQueue:
        mine = [q for q in queues if q.broker_name == self.only_broker]
        if not mine:
            raise BrokerNotExistError(f"no queue of {self.topic} on {self.only_broker}")
        return mine[i % len(mine)]

    def _send(self, body: bytes, i: int) -> SendResult:
        msg = Message(self.topic, body)
        if self.only_broker:
            return self._producer.send(msg, self._pick, i)
        return self._producer.send(msg)

    def _produce(self) -> None:
        i = 0
        while not self._stop.is_set():
            body = f"{self.only_broker or 'r'}-{i}".encode()
            i += 1
            started = time.monotonic()
            try:
                result = self._send(body, i)
                if result.status == SendStatus.SEND_OK:
                    queue = result.queue
                    self.acked.append(body)
                    self.acks.append(
                        Ack(time.monotonic(), queue.broker_name, body, started, queue.queue_id)
                    )
            except FerryError as err:
                name = type(err).__name__
                self.failed[name] = self.failed.get(name, 0) + 1

    def first_ack_after(self, since: float, broker: str = "", start: int = 0) -> float | None:
        """When the first send begun at or after `since` (to `broker`, if given) was
        acknowledged; None before any was. A send in flight at a kill may be acknowledged by
        the killed master a moment after it: that is no write of the next one. `start`: an
        index of `acks` known to come before."""
        for ack in self.acks[start:]:
            if ack.started >= since and (not broker or ack.broker == broker):
                return ack.at
        return None

    def _consume(self) -> None:
        assert self._consumer is not None
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
        if self._consumer is not None:
            self._consumer.shutdown()


def group_state(group: ControlledGroup) -> BrokerGroupState | None:
    """The controller's state of the group (master, epoch, in-sync set), None before any."""
    request = ControllerGetSyncStateDataRequest(broker_names=[group.broker_name])
    deadline = time.monotonic() + 10
    reply = status(group.controller_addr, request)
    # a slow etcd answer is a retriable error (etcd unreachable within etcdTimeoutMills): ask
    # again, as a broker would, rather than fail the round on it
    while isinstance(reply, ErrorReply) and reply.retriable and time.monotonic() < deadline:
        time.sleep(0.2)  # wait-ok: between asks of a deadline-bounded retry
        reply = status(group.controller_addr, request)
    assert isinstance(reply, ControllerSyncStateDataReply), reply
    return next((g for g in reply.groups if g.broker_name == group.broker_name), None)


def has_topic(broker_addr: str, topic: str) -> bool:
    """The broker (a master, or a slave once its metadata sync copied it) holds the topic."""
    reply = status(broker_addr, GetAllTopicConfigRequest())
    return isinstance(reply, TopicConfigListReply) and any(
        t.topic_name == topic for t in reply.topics
    )


def topic_on_replicas(group: ControlledGroup, topic: str) -> bool:
    """Every live replica holds the topic: a replica elected before its metadata sync copied
    a new topic from the master would serve without it (as RocketMQ's slaves)."""
    live = [r for r in group.replicas.values() if r.proc.poll() is None]
    return all(has_topic(r.addr, topic) for r in live)


def in_sync_count(group: ControlledGroup) -> int:
    state = group_state(group)
    return len(state.sync_state_set) if state is not None else 0


@dataclass
class Round:
    """One failover, in seconds from the kill: the controller's new epoch, the name server's
    route naming a new master (id 0), and the first write acknowledged after the kill."""

    replica_id: int
    elected: float
    routed: float
    acked: float
    killed_at: float = 0.0  # time.monotonic() of the kill

    def __str__(self) -> str:
        return (
            f"replica {self.replica_id} killed: elected {self.elected:.2f} s, "
            f"routed {self.routed:.2f} s, writes after {self.acked:.2f} s"
        )


def master_in_route(namesrv: str, topic: str, broker_name: str) -> str:
    """The address the name server routes broker_name's id 0 to ("" when none)."""
    reply = status(namesrv, GetRouteInfoRequest(topic))
    if not isinstance(reply, RouteInfoReply):
        return ""
    for data in reply.route.broker_datas:
        if data.broker_name == broker_name:
            return data.broker_addrs.get(0, "")
    return ""


def fail_over(group: ControlledGroup, traffic: Traffic, timeout: float = 60) -> Round:
    """Kills the master's tree and times the phases until the next acknowledged write."""
    master = group.master(30)
    state = group_state(group)
    old_epoch = state.epoch if state is not None else 0
    before = len(traffic.acked)
    killed_at = time.monotonic()
    master.kill_tree()
    elected = routed = acked = 0.0
    deadline = killed_at + timeout
    while not (elected and routed and acked):
        now = time.monotonic()
        if now > deadline:
            pytest.fail(f"no failover in {timeout}s (elected {elected}, routed {routed})")
        if not elected:
            state = group_state(group)
            elected = now - killed_at if state and state.epoch > old_epoch else 0.0
        if not routed:
            addr = master_in_route(group.namesrv_addr, traffic.topic, group.broker_name)
            routed = now - killed_at if addr and addr != master.addr else 0.0
        first = None if acked else traffic.first_ack_after(killed_at, start=before)
        if first is not None:  # the time of the first ack itself, not of this poll
            acked = first - killed_at
        time.sleep(0.02)  # wait-ok: polling three clocks at once, each bounded by the deadline
    assert group.master(30) is not master
    return Round(master.replica_id, elected, routed, acked, killed_at)


def kill_masters(
    group: ControlledGroup, traffic: Traffic, rounds: int, say: Any = None
) -> list[Round]:
    """`rounds` times: once a slave is in sync, kill -9 the master's tree and time the phases
    until the next acknowledged write; then start the killed tree again (the lost machine
    comes back)."""
    done: list[Round] = []
    for i in range(rounds):
        wait_for(lambda: in_sync_count(group) >= 2, 60, "a slave in sync")
        done.append(fail_over(group, traffic))
        if say is not None:
            say(f"round {i + 1}: {done[-1]}")
        group.start_replica(done[-1].replica_id)
    return done


def final_log(
    group: ControlledGroup, want: set[bytes], wait_s: float = 60, topic: str = "Failover"
) -> set[bytes]:
    """Every body of the topic a new consumer group reads from the start (until it has read
    `want` and two polls in a row find nothing more, or wait_s passed): what the group's log (the
    cluster's) finally holds, unacknowledged messages that were kept included."""
    final: set[bytes] = set()
    with PullConsumer(
        "cg-final-log", group.namesrv_addr, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe(topic)
        deadline = time.monotonic() + wait_s
        quiet = 0  # polls in a row that found nothing
        while time.monotonic() < deadline and not (want <= final and quiet >= 2):
            got = {m.body for m in consumer.poll(timeout=0.5)}
            final |= got
            quiet = 0 if got else quiet + 1
    return final


def loss_report(
    group: ControlledGroup, traffic: Traffic, lost: set[bytes], kills: list[float]
) -> str:
    """What a failed no-loss assertion needs to be understood: the lost messages by queue and
    by the round they were acknowledged in (`kills`: time.monotonic() of each kill), and every
    live replica's view of the topic (its config and queue stats)."""
    acks = [ack for ack in traffic.acks if ack.body in lost]
    by_queue = Counter(ack.queue_id for ack in acks)
    by_round = Counter(sum(1 for k in kills if k <= ack.at) for ack in acks)
    lines = [
        f"{len(lost)} lost of {len(traffic.acked)} acknowledged;"
        f" by queue id {dict(sorted(by_queue.items()))};"
        f" by rounds before the ack {dict(sorted(by_round.items()))}",
        f"first lost {sorted(lost, key=lambda b: int(b.split(b'-')[-1]))[:5]}",
    ]
    return "\n".join([*lines, topic_views(group, traffic.topic)])


def topic_views(group: ControlledGroup, topic: str) -> str:
    """Every live replica's config of `topic` and its queues' offsets, a line each."""
    lines = []
    for replica in group.replicas.values():
        if replica.proc.poll() is not None:
            continue
        topics = status(replica.addr, GetAllTopicConfigRequest())
        configs = [t for t in getattr(topics, "topics", []) if t.topic_name == topic]
        stats = status(replica.addr, GetTopicStatsRequest(topic))
        queues = getattr(stats, "queues", [])
        pulls = [
            status(replica.addr, PullMessageRequest("cg-view", topic, q.queue_id, 0))
            for q in queues
        ]
        lines.append(
            f"replica {replica.replica_id} ({replica.last_role()}): {configs}; "
            f"{queues or stats}; pulls from 0: {pulls}"
        )
    return "\n".join(lines)


def send_ok(producer: Producer, body: bytes, topic: str = "Failover") -> bool:
    """One send through the SDK; True only for SEND_OK (a failed send is False, to retry)."""
    try:
        return producer.send(Message(topic, body)).status == SendStatus.SEND_OK
    except FerryError:
        return False


def raw_send(addr: str, body: bytes, topic: str = "Failover") -> object:
    """One send straight to a broker's remoting, as a producer with an old route would."""
    rec = record.encode_record(topic.encode(), body, record.encode_properties({}))
    with BlockingClient(f"tcp://{addr}") as client:
        answer = client.call(SendMessageRequest("pg-raw", topic, -1), 3000, [rec])
    return None if answer is None else answer[0]
