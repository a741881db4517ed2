"""The name server's state: which brokers are alive and which topics they serve.

RocketMQ's RouteInfoManager without the sockets. Brokers of one broker name form a group
(id 0 the master, >0 slaves); only the master's registration sets the group's queue data.
A group's queue data stays while any member of the group is alive, as in RocketMQ, so that
consumers can still read from a slave when the master is gone (producers skip queues whose
group has no master address in the route).

Controller mode: registrations carry the broker's epoch, and a group's master is the one of
the highest epoch heard. A master of an older epoch (one paused past its lease, resumed before
it learnt it was replaced) is refused, and its unregistration removes nothing: it never
replaces or removes the entry of the master elected after it. The epoch is remembered while
the name server runs, even after the group's entries expired.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ferry.protocol.codes import Perm
from ferry.protocol.errors import IllegalStateError, TopicNotExistError
from ferry.protocol.messages import (
    BrokerData,
    ClusterInfoReply,
    QueueData,
    RegisterBrokerReply,
    TopicConfig,
    TopicRouteData,
)

MASTER_ID = 0


@dataclass
class _Member:
    addr: str
    ha_addr: str
    timeout_ms: int
    last_update_ms: int
    rocketmq_addr: str = ""


@dataclass
class _Group:
    cluster: str
    members: dict[int, _Member] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokerRef:
    """One broker as it was known; what register/unregister/expire report for logging."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str


@dataclass(frozen=True)
class Registration:
    reply: RegisterBrokerReply
    first: bool  # a broker (or an address for its id) not known before: worth a log line


class RouteTable:
    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}
        # topic -> broker name -> queue data
        self._topics: dict[str, dict[str, QueueData]] = {}
        # broker names whose queues are not offered for writing (wipeWritePerm); kept across
        # re-registrations until addWritePerm
        self._wiped: set[str] = set()
        # broker name -> the highest epoch a master of it registered with
        self._master_epochs: dict[str, int] = {}

    def register(
        self,
        *,
        cluster: str,
        broker_name: str,
        broker_id: int,
        broker_addr: str,
        ha_addr: str = "",
        rocketmq_addr: str = "",
        topics: Mapping[str, TopicConfig] | None = None,
        timeout_ms: int,
        now_ms: int,
        epoch: int = 0,
    ) -> Registration:
        if broker_id == MASTER_ID:
            newest = self._master_epochs.get(broker_name, 0)
            if epoch < newest:
                raise IllegalStateError(
                    f"{broker_name}: a master of epoch {epoch} is refused: a master of epoch "
                    f"{newest} registered (this broker was replaced; it must follow the new "
                    "master)"
                )
            self._master_epochs[broker_name] = epoch
        group = self._groups.setdefault(broker_name, _Group(cluster))
        group.cluster = cluster
        # A broker that changed its id (role switch) is still listed under the old one.
        for old_id, member in list(group.members.items()):
            if member.addr == broker_addr and old_id != broker_id:
                del group.members[old_id]
        known = group.members.get(broker_id)
        first = known is None or known.addr != broker_addr
        group.members[broker_id] = _Member(broker_addr, ha_addr, timeout_ms, now_ms, rocketmq_addr)
        if broker_id == MASTER_ID:
            self._set_queue_data(broker_name, topics or {})
            return Registration(RegisterBrokerReply(), first)
        master = group.members.get(MASTER_ID)
        if master is None:
            return Registration(RegisterBrokerReply(), first)
        return Registration(RegisterBrokerReply(master.addr, master.ha_addr), first)

    def unregister(
        self, *, broker_name: str, broker_id: int, broker_addr: str, epoch: int = 0
    ) -> BrokerRef | None:
        """Removes the broker if it is listed with that address (a master: and of an epoch
        no older than the newest heard); None when it is not."""
        group = self._groups.get(broker_name)
        if group is None:
            return None
        if broker_id == MASTER_ID and epoch < self._master_epochs.get(broker_name, 0):
            return None
        member = group.members.get(broker_id)
        if member is None or member.addr != broker_addr:
            return None
        return self._remove(broker_name, broker_id)

    def expire(self, now_ms: int) -> list[BrokerRef]:
        """Removes every broker whose last registration is older than its timeout."""
        stale = [
            (name, broker_id)
            for name, group in self._groups.items()
            for broker_id, member in group.members.items()
            if now_ms - member.last_update_ms > member.timeout_ms
        ]
        return [self._remove(name, broker_id) for name, broker_id in stale]

    def route(self, topic: str) -> TopicRouteData:
        queues = self._topics.get(topic)
        if not queues:
            raise TopicNotExistError(f"No route info of this topic: {topic}")
        names = sorted(queues)
        return TopicRouteData(
            queue_datas=[self._visible(queues[name]) for name in names],
            broker_datas=[self._broker_data(name) for name in names if name in self._groups],
        )

    def cluster_info(self) -> ClusterInfoReply:
        clusters: dict[str, list[str]] = {}
        for name in sorted(self._groups):
            clusters.setdefault(self._groups[name].cluster, []).append(name)
        brokers = {name: self._broker_data(name) for name in self._groups}
        return ClusterInfoReply(brokers=brokers, clusters=clusters)

    def topic_names(self) -> list[str]:
        return sorted(self._topics)

    def delete_topic(self, topic: str, cluster: str = "") -> bool:
        """Drops a topic's route (of the broker groups of `cluster` only, when given); False
        when there was nothing to drop. A broker still holding the topic brings it back at its
        next registration, so brokers drop it first."""
        queues = self._topics.get(topic)
        if queues is None:
            return False
        for name in list(queues):
            group = self._groups.get(name)
            if not cluster or (group is not None and group.cluster == cluster):
                self._drop_queue_data(topic, name)
        return True

    def set_write_perm(self, broker_name: str, writable: bool) -> int:
        """wipeWritePerm / addWritePerm: returns how many topics of the broker it changes."""
        if writable:
            self._wiped.discard(broker_name)
        else:
            self._wiped.add(broker_name)
        return sum(
            1
            for queues in self._topics.values()
            if broker_name in queues and queues[broker_name].perm & Perm.WRITE
        )

    def _visible(self, data: QueueData) -> QueueData:
        if data.broker_name in self._wiped and data.perm & Perm.WRITE:
            return QueueData(
                data.broker_name,
                data.read_queue_nums,
                data.write_queue_nums,
                data.perm & ~Perm.WRITE,
            )
        return data

    # ---- internals ----

    def _set_queue_data(self, broker_name: str, topics: Mapping[str, TopicConfig]) -> None:
        """The master's topic set replaces what its group had."""
        for name, config in topics.items():
            self._topics.setdefault(name, {})[broker_name] = QueueData(
                broker_name, config.read_queue_nums, config.write_queue_nums, config.perm
            )
        for name in [t for t in self._topics if t not in topics]:
            self._drop_queue_data(name, broker_name)

    def _drop_queue_data(self, topic: str, broker_name: str) -> None:
        queues = self._topics[topic]
        queues.pop(broker_name, None)
        if not queues:
            del self._topics[topic]

    def _remove(self, broker_name: str, broker_id: int) -> BrokerRef:
        group = self._groups[broker_name]
        member = group.members.pop(broker_id)
        if not group.members:
            del self._groups[broker_name]
            for topic in list(self._topics):
                self._drop_queue_data(topic, broker_name)
        return BrokerRef(group.cluster, broker_name, broker_id, member.addr)

    def _broker_data(self, broker_name: str) -> BrokerData:
        group = self._groups[broker_name]
        members = sorted(group.members.items())
        addrs = {broker_id: m.addr for broker_id, m in members}
        doors = {broker_id: m.rocketmq_addr for broker_id, m in members if m.rocketmq_addr}
        return BrokerData(
            cluster=group.cluster,
            broker_name=broker_name,
            broker_addrs=addrs,
            rocketmq_addrs=doors,
        )
