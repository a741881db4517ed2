"""What the controller's decisions share: checks of names and addresses, the live
candidates of a group, the view of a group a reply carries, and the retry of a
compare-and-swap that lost to another writer."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ferry.controller.election import Candidate
from ferry.controller.model import (
    Group,
    StateDoc,
    name_problem,
)
from ferry.protocol.errors import (
    ControllerNotLeaderError,
    InvalidParameterError,
)
from ferry.protocol.messages import (
    BrokerGroupState,
    EpochEntry,
    ReplicaStatus,
)

ATTEMPTS = 4  # reads and transactions of one request before it gives up (retriable)
MAX_ADDR = 300
R = TypeVar("R")


def check_group_names(cluster: str, broker_name: str) -> None:
    for what, name in (("cluster", cluster), ("broker_name", broker_name)):
        problem = name_problem(what, name)
        if problem:
            raise InvalidParameterError(problem)


def check_addr(what: str, addr: str, *, required: bool = True) -> None:
    if not addr and not required:
        return
    host, sep, port = addr.rpartition(":")
    if len(addr) > MAX_ADDR or not sep or not host or not port.isdigit():
        raise InvalidParameterError(f"{what} {addr[:MAX_ADDR]!r} is not host:port")
    if not 0 < int(port) <= 65535:
        raise InvalidParameterError(f"{what} {addr!r} is not host:port")


def candidates(group: Group, extra: Candidate | None = None) -> dict[int, Candidate]:
    """The live, registered replicas (and `extra`, the one heartbeating now)."""
    out = {
        rid: Candidate(rid, group.replicas[rid].priority, a.doc.max_offset, a.doc.epoch)
        for rid, a in group.alive.items()
        if rid in group.replicas
    }
    if extra is not None:
        out[extra.replica_id] = extra
    return out


def known_epoch(group: Group, extra: int = 0) -> int:
    return max([extra, *(a.doc.epoch for a in group.alive.values())])


def group_view(group: Group) -> BrokerGroupState:
    st = group.state or StateDoc()
    master = group.replicas.get(st.master_id)
    replicas = [
        ReplicaStatus(
            replica_id=rid,
            addr=doc.addr,
            ha_addr=doc.ha_addr,
            priority=doc.priority,
            registered_ms=doc.registered_ms,
            alive=rid in group.alive,
            max_offset=group.alive[rid].doc.max_offset if rid in group.alive else 0,
            epoch=group.alive[rid].doc.epoch if rid in group.alive else 0,
            role=group.alive[rid].doc.role if rid in group.alive else "",
            in_sync=rid in st.sync_state_set,
        )
        for rid, doc in sorted(group.replicas.items())
    ]
    return BrokerGroupState(
        cluster=group.cluster,
        broker_name=group.broker_name,
        master_id=st.master_id,
        master_addr=master.addr if master else st.master_addr,
        master_ha_addr=master.ha_addr if master else st.master_ha_addr,
        epoch=st.epoch,
        sync_state_set=sorted(st.sync_state_set),
        sync_state_set_epoch=st.sync_state_set_epoch,
        epochs=[EpochEntry(e, o) for e, o in st.epochs],
        replicas=replicas,
        handover_to=st.handover_to,
    )


def until_done(attempt: Callable[[], R | None], broker_name: str) -> R:
    """attempt() again while it says another writer changed the group first (None)."""
    for _ in range(ATTEMPTS):
        reply = attempt()
        if reply is not None:
            return reply
    raise ControllerNotLeaderError(f"the state of {broker_name} kept changing; retry")
