"""The controller's decisions, run on the etcd thread: each reads a group at one revision,
decides, and writes with one transaction that compares the state key's mod_revision (and,
for an election, that the old master's alive key is gone). A compare that fails means another
controller or heartbeat changed the group first: read again and decide again.

Why no two masters: a master is granted a write lease only by a heartbeat whose transaction
saw the state unchanged and put its alive key on an etcd lease refreshed after the broker sent
that heartbeat; the broker's lease (shorter) runs out before that etcd lease can. An election
needs the old master's alive key gone, which etcd does only when that lease lapses (or
cleanBrokerMetadata deletes it, which it refuses for a live master). A manual switch
(electMaster while the master lives) first fences the master: it gets no more leases, and is
replaced once its alive key lapses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from ferry.controller import election
from ferry.controller.config import ControllerConfig
from ferry.controller.election import Candidate
from ferry.controller.etcd_state import (
    Etcd,
    EtcdRejectedError,
    absent,
    delete,
    delete_prefix,
    mod_revision_is,
    put,
)
from ferry.controller.model import (
    CONTROLLERS_PREFIX,
    AliveDoc,
    Group,
    ReplicaDoc,
    StateDoc,
    alive_key,
    name_problem,
    replica_key,
    state_key,
)
from ferry.protocol.errors import (
    ControllerBrokerNotAliveError,
    ControllerElectMasterFailedError,
    ControllerInvalidCleanError,
    ControllerMetadataNotExistError,
    ControllerNeedToRegisterError,
    ControllerNotLeaderError,
    InvalidParameterError,
)
from ferry.protocol.messages import (
    MASTER_ROLE,
    BrokerGroupState,
    ControllerCleanBrokerDataReply,
    ControllerCleanBrokerDataRequest,
    ControllerElectMasterReply,
    ControllerElectMasterRequest,
    ControllerGetSyncStateDataRequest,
    ControllerHeartbeatReply,
    ControllerHeartbeatRequest,
    ControllerMetadataReply,
    ControllerRegisterBrokerReply,
    ControllerRegisterBrokerRequest,
    ControllerSyncStateDataReply,
    EpochEntry,
    ReplicaStatus,
)
from ferry.runtime.throttled_log import ThrottledLog

log = logging.getLogger("ferry.controller")

ATTEMPTS = 4  # reads and transactions of one request before it gives up (retriable)
CONTROLLER_TTL_S = 10  # a controller's own registration (getControllerMetaData)
MAX_ADDR = 300
MAX_REMEMBERED = 10_000  # lease ids and logged groups kept in memory, at most
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


class Decisions:
    """What the controller does with each request and scan; its methods block on etcd."""

    def __init__(self, config: ControllerConfig, etcd: Etcd, addr: str) -> None:
        self.config = config
        self.etcd = etcd
        self.addr = addr
        self._leases: dict[str, int] = {}  # alive key -> the etcd lease last put on it
        self._own_lease = 0
        self._bad_input = ThrottledLog(log)
        self._reported: set[tuple[str, str, int]] = set()  # (cluster, broker, epoch) logged

    # ---- brokers ----

    def register(self, req: ControllerRegisterBrokerRequest) -> ControllerRegisterBrokerReply:
        check_group_names(req.cluster, req.broker_name)
        if req.replica_id < 1:
            raise InvalidParameterError(f"replica_id {req.replica_id} must be 1 or more")
        check_addr("addr", req.addr)
        check_addr("ha_addr", req.ha_addr, required=False)
        group = self.etcd.group(req.cluster, req.broker_name)
        old = group.replicas.get(req.replica_id)
        doc = ReplicaDoc(
            addr=req.addr,
            ha_addr=req.ha_addr,
            priority=req.priority,
            registered_ms=old.registered_ms if old else int(time.time() * 1000),
        )
        if old != doc:
            key = replica_key(req.cluster, req.broker_name, req.replica_id)
            self.etcd.txn([], [put(key, doc)])
            group.replicas[req.replica_id] = doc
            log.info(
                "replica %d of %s/%s registered at %s",
                req.replica_id,
                req.cluster,
                req.broker_name,
                req.addr,
            )
        view = group_view(group)
        return ControllerRegisterBrokerReply(
            master_id=view.master_id,
            master_addr=view.master_addr,
            master_ha_addr=view.master_ha_addr,
            epoch=view.epoch,
            sync_state_set=view.sync_state_set,
            sync_state_set_epoch=view.sync_state_set_epoch,
            epochs=view.epochs,
        )

    def heartbeat(self, req: ControllerHeartbeatRequest) -> ControllerHeartbeatReply:
        check_group_names(req.cluster, req.broker_name)
        return until_done(lambda: self._heartbeat_once(req), req.broker_name)

    def _heartbeat_once(self, req: ControllerHeartbeatRequest) -> ControllerHeartbeatReply | None:
        group = self.etcd.group(req.cluster, req.broker_name)
        me = req.replica_id
        if me not in group.replicas:
            raise ControllerNeedToRegisterError(
                f"replica {me} of {req.cluster}/{req.broker_name} is not registered"
            )
        state = group.state
        compare = [mod_revision_is(state_key(req.cluster, req.broker_name), group.state_rev)]
        ops: list[dict[str, Any]] = []
        new_state = None
        fenced = False
        if state is not None and state.master_id == me:
            handover = state.handover_to not in (0, me)
            # fenced while electMaster's target lives; a dead target cancels the switch, or
            # the group would be left with no master at all
            fenced = handover and state.handover_to in group.alive
            if handover and not fenced:
                state = msgspec.structs.replace(state, handover_to=0)
                log.warning(
                    "%s/%s: electMaster's target %d is not alive: switch cancelled",
                    req.cluster,
                    req.broker_name,
                    group.state.handover_to if group.state else 0,
                )
            if not fenced:
                new_state = self._sync_state_set_change(group, state, req)
                if new_state is None and handover:
                    new_state = state
        elif group.never_elected:
            me_now = Candidate(me, group.replicas[me].priority, req.max_offset, req.epoch)
            choice = election.choose_master(
                candidates(group, me_now), [], unclean=False, first=True
            )
            if choice is not None:
                winner = candidates(group, me_now)[choice.replica_id]
                new_state = election.elected_state(
                    state, winner, group.replicas[winner.replica_id], known_epoch(group, req.epoch)
                )
        if new_state is not None:
            ops.append(put(state_key(req.cluster, req.broker_name), new_state))
        lease = 0
        if not fenced:
            lease = self._live_lease(group, req.cluster, req.broker_name, me)
            alive = AliveDoc(max_offset=req.max_offset, epoch=req.epoch, role=req.role)
            ops.append(put(alive_key(req.cluster, req.broker_name, me), alive, lease))
        try:
            if ops and not self.etcd.txn(compare, ops):
                return None
        except EtcdRejectedError:  # most likely the lease lapsed between refresh and put
            self._leases.pop(alive_key(req.cluster, req.broker_name, me), None)
            return None
        final = new_state or state or StateDoc()
        if new_state is not None and new_state.epoch != (state.epoch if state else 0):
            log.info(
                "%s/%s: replica %d elected master, epoch %d (first election)",
                req.cluster,
                req.broker_name,
                new_state.master_id,
                new_state.epoch,
            )
        master = group.replicas.get(final.master_id)
        granted = final.master_id == me and not fenced
        return ControllerHeartbeatReply(
            master_id=final.master_id,
            master_addr=master.addr if master else final.master_addr,
            master_ha_addr=master.ha_addr if master else final.master_ha_addr,
            epoch=final.epoch,
            sync_state_set=sorted(final.sync_state_set),
            sync_state_set_epoch=final.sync_state_set_epoch,
            lease_ms=self._lease_ms(req.lease_ms) if granted else 0,
            epochs=[EpochEntry(e, o) for e, o in final.epochs],
        )

    def _lease_ms(self, asked: int) -> int:
        most = self.config.heartbeat_lease_ms
        return min(asked, most) if asked > 0 else most

    def _sync_state_set_change(
        self, group: Group, state: StateDoc, req: ControllerHeartbeatRequest
    ) -> StateDoc | None:
        """The master's in-sync set, stored when it reports one of its own epoch."""
        if not req.sync_state_set or req.epoch != state.epoch or req.role != MASTER_ROLE:
            return None
        problem = election.sync_state_set_problem(
            state, req.replica_id, req.sync_state_set, group.replicas
        )
        if problem:
            self._bad_input.warning("%s/%s: %s", req.cluster, req.broker_name, problem)
            return None
        changed = election.with_sync_state_set(state, req.sync_state_set)
        if changed is not None:
            log.info(
                "%s/%s: sync state set %s -> %s (epoch %d)",
                req.cluster,
                req.broker_name,
                sorted(state.sync_state_set),
                changed.sync_state_set,
                changed.sync_state_set_epoch,
            )
        return changed

    def _live_lease(self, group: Group, cluster: str, broker_name: str, replica_id: int) -> int:
        """The replica's etcd lease, refreshed now; a new one when it lapsed."""
        key = alive_key(cluster, broker_name, replica_id)
        alive = group.alive.get(replica_id)
        lease = alive.lease if alive is not None else self._leases.get(key, 0)
        if lease and self.etcd.keepalive(lease) > 0:
            self._leases[key] = lease
            return lease
        lease = self.etcd.grant(self.config.lease_ttl_s)
        if len(self._leases) >= MAX_REMEMBERED:  # only a hint: etcd's keys hold the truth
            self._leases.clear()
        self._leases[key] = lease
        return lease

    # ---- elections ----

    def scan(self) -> None:
        """Elects a master for every group whose master's lease lapsed; keeps this
        controller's own registration alive."""
        self._announce()
        for group in self.etcd.groups().values():
            state = group.state
            if state is None and group.state_rev:
                continue  # unreadable state: left for a person (logged by the read)
            if state is not None and state.master_id and group.master_alive:
                continue
            if state is None and not group.alive:
                continue
            self._elect(group, preferred=state.handover_to if state else 0)

    def _elect(self, group: Group, preferred: int = 0, forced: int = 0) -> StateDoc | None:
        """One election in `group` (read at one revision): the new state, or None when no
        replica may win or another writer changed the group first. forced: electMaster's
        target, checked by the caller."""
        state = group.state
        where = f"{group.cluster}/{group.broker_name}"
        if forced:
            in_sync = group.never_elected or (state is not None and forced in state.sync_state_set)
            choice: election.Choice | None = election.Choice(forced, in_sync)
        else:
            choice = election.choose_master(
                candidates(group),
                state.sync_state_set if state else [],
                unclean=self.config.enable_elect_unclean_master,
                first=group.never_elected,
                preferred=preferred,
            )
        if choice is None:
            seen = (group.cluster, group.broker_name, state.epoch if state else 0)
            if seen not in self._reported:
                if len(self._reported) >= MAX_REMEMBERED:
                    self._reported.clear()
                self._reported.add(seen)
                log.warning(
                    "%s: master %s is gone and no replica of the sync state set %s is alive",
                    where,
                    state.master_id if state else 0,
                    sorted(state.sync_state_set) if state else [],
                )
            return None
        winner = candidates(group)[choice.replica_id]
        new_state = election.elected_state(
            state, winner, group.replicas[winner.replica_id], known_epoch(group)
        )
        compare = [mod_revision_is(state_key(group.cluster, group.broker_name), group.state_rev)]
        if state is not None and state.master_id:
            compare.append(absent(alive_key(group.cluster, group.broker_name, state.master_id)))
        if not self.etcd.txn(
            compare, [put(state_key(group.cluster, group.broker_name), new_state)]
        ):
            return None
        log.warning(
            "%s: replica %d elected master, epoch %d, from offset %d (old master %s%s)",
            where,
            new_state.master_id,
            new_state.epoch,
            winner.max_offset,
            state.master_id if state else "none",
            "" if choice.clean else "; UNCLEAN: it was not in the sync state set",
        )
        return new_state

    def elect_master(self, req: ControllerElectMasterRequest) -> ControllerElectMasterReply:
        check_group_names(req.cluster, req.broker_name)
        return until_done(lambda: self._elect_master_once(req), req.broker_name)

    def _elect_master_once(
        self, req: ControllerElectMasterRequest
    ) -> ControllerElectMasterReply | None:
        group = self.etcd.group(req.cluster, req.broker_name)
        if not group.replicas:
            raise ControllerMetadataNotExistError(
                f"no replica of {req.cluster}/{req.broker_name} is registered"
            )
        target = self._target(group, req)
        state = group.state or StateDoc()
        if target and target not in group.alive:
            raise ControllerBrokerNotAliveError(f"replica {target} has no live heartbeat")
        unclean = self.config.enable_elect_unclean_master
        in_sync = group.never_elected or target in state.sync_state_set
        if target and not in_sync and not unclean:
            raise ControllerElectMasterFailedError(
                f"replica {target} is not in the sync state set {sorted(state.sync_state_set)}"
                " (enableElectUncleanMaster=false)"
            )
        skey = state_key(req.cluster, req.broker_name)
        if group.master_alive:
            if not target:
                raise ControllerElectMasterFailedError(
                    f"master {state.master_id} is alive: name the replica to switch to (-b)"
                )
            wanted = 0 if target == state.master_id else target
            if state.handover_to != wanted:
                fenced = msgspec.structs.replace(state, handover_to=wanted)
                if not self.etcd.txn([mod_revision_is(skey, group.state_rev)], [put(skey, fenced)]):
                    return None
                group.state = fenced
                if wanted:
                    log.warning(
                        "%s/%s: electMaster: master %d fenced, replica %d takes over once "
                        "its lease lapses",
                        req.cluster,
                        req.broker_name,
                        state.master_id,
                        wanted,
                    )
            wait_ms = self.config.controller_heart_beat_timeout_mills
            wait_ms += 2 * self.config.scan_not_active_broker_interval
            return ControllerElectMasterReply(
                state=group_view(group), pending=bool(wanted), wait_ms=wait_ms if wanted else 0
            )
        new_state = self._elect(group, forced=target)
        if new_state is None:
            if target:  # the target was eligible: the group changed under us
                return None
            raise ControllerElectMasterFailedError(
                f"no live replica of {req.broker_name} may become master"
            )
        group.state = new_state
        return ControllerElectMasterReply(state=group_view(group))

    @staticmethod
    def _target(group: Group, req: ControllerElectMasterRequest) -> int:
        if req.replica_id:
            if req.replica_id not in group.replicas:
                raise ControllerMetadataNotExistError(f"replica {req.replica_id} is not registered")
            return req.replica_id
        if not req.broker_addr:
            return 0
        for rid, doc in group.replicas.items():
            if req.broker_addr in (doc.addr, doc.ha_addr):
                return rid
        raise ControllerMetadataNotExistError(
            f"no replica of {req.broker_name} is registered at {req.broker_addr}"
        )

    # ---- administration ----

    def clean(self, req: ControllerCleanBrokerDataRequest) -> ControllerCleanBrokerDataReply:
        check_group_names(req.cluster, req.broker_name)
        return until_done(lambda: self._clean_once(req), req.broker_name)

    def _clean_once(
        self, req: ControllerCleanBrokerDataRequest
    ) -> ControllerCleanBrokerDataReply | None:
        group = self.etcd.group(req.cluster, req.broker_name)
        if not group.replicas and group.state is None and not group.state_rev:
            raise ControllerMetadataNotExistError(
                f"the controller holds nothing for {req.cluster}/{req.broker_name}"
            )
        whole = not req.replica_ids
        ids = sorted(group.replicas) if whole else sorted(set(req.replica_ids))
        unknown = [i for i in ids if i not in group.replicas]
        if unknown:
            raise ControllerMetadataNotExistError(f"replicas {unknown} are not registered")
        state = group.state or StateDoc()
        if group.master_alive and (whole or state.master_id in ids):
            raise ControllerInvalidCleanError(
                f"replica {state.master_id} is the live master of {req.broker_name} and holds "
                "a write lease: stop it (or electMaster another replica) first"
            )
        living = [i for i in ids if i in group.alive]
        if living and not req.clean_living:
            raise ControllerInvalidCleanError(
                f"replicas {living} are alive; add --cleanLivingBroker to clean them anyway"
            )
        skey = state_key(req.cluster, req.broker_name)
        compare = [mod_revision_is(skey, group.state_rev)]
        if state.master_id and (whole or state.master_id in ids):
            # the master must still be dead when this commits
            compare.append(absent(alive_key(req.cluster, req.broker_name, state.master_id)))
        if not req.clean_living:
            compare += [absent(alive_key(req.cluster, req.broker_name, i)) for i in ids]
        if whole:
            if not self.etcd.txn(compare, [delete_prefix(group.prefix)]):
                return None
            log.warning("%s/%s: every replica's metadata cleaned", req.cluster, req.broker_name)
            return ControllerCleanBrokerDataReply(cleaned=ids, group_removed=True)
        ops = []
        for i in ids:
            ops += [
                delete(replica_key(req.cluster, req.broker_name, i)),
                delete(alive_key(req.cluster, req.broker_name, i)),
            ]
        if group.state is not None:
            kept = [i for i in state.sync_state_set if i not in ids]
            new_state = msgspec.structs.replace(
                state,
                sync_state_set=kept,
                sync_state_set_epoch=state.sync_state_set_epoch + (kept != state.sync_state_set),
                handover_to=0 if state.handover_to in ids else state.handover_to,
            )
            if state.master_id in ids:
                new_state = msgspec.structs.replace(
                    new_state, master_id=0, master_addr="", master_ha_addr=""
                )
            ops.append(put(skey, new_state))
        if not self.etcd.txn(compare, ops):
            return None
        log.warning("%s/%s: replicas %s cleaned", req.cluster, req.broker_name, ids)
        return ControllerCleanBrokerDataReply(cleaned=ids)

    def sync_state(self, req: ControllerGetSyncStateDataRequest) -> ControllerSyncStateDataReply:
        if req.cluster:
            check_group_names(req.cluster, "x")
        groups = self.etcd.groups(req.cluster)
        chosen = [
            g
            for (_, name), g in sorted(groups.items())
            if not req.broker_names or name in req.broker_names
        ]
        missing = sorted(set(req.broker_names) - {g.broker_name for g in chosen})
        if missing:
            raise ControllerMetadataNotExistError(
                f"the controller holds nothing for {', '.join(missing)}"
            )
        return ControllerSyncStateDataReply(groups=[group_view(g) for g in chosen])

    def metadata(self) -> ControllerMetadataReply:
        cfg = self.config
        base: dict[str, Any] = {
            "addr": self.addr,
            "etcd_endpoints": self.etcd.endpoints,
            "heartbeat_timeout_ms": cfg.controller_heart_beat_timeout_mills,
            "elect_unclean_master": cfg.enable_elect_unclean_master,
        }
        try:
            status = self.etcd.status()
            members = self.etcd.members()
            _, kvs = self.etcd.range_prefix(CONTROLLERS_PREFIX)
        except ControllerNotLeaderError:
            return ControllerMetadataReply(**base)
        names = {str(m.get("ID", "")): str(m.get("name", "")) for m in members}
        return ControllerMetadataReply(
            **base,
            controllers=sorted(kv.key[len(CONTROLLERS_PREFIX) :] for kv in kvs),
            etcd_reachable=True,
            etcd_version=str(status.get("version", "")),
            etcd_leader=names.get(str(status.get("leader", "")), str(status.get("leader", ""))),
            etcd_members=[
                f"{m.get('name', '')}={','.join(m.get('clientURLs', []))}" for m in members
            ],
        )

    def _announce(self) -> None:
        """This controller's key under /ferry-controllers/, on a lease of its own."""
        if self._own_lease and self.etcd.keepalive(self._own_lease) > 0:
            return
        self._own_lease = self.etcd.grant(CONTROLLER_TTL_S)
        self.etcd.txn([], [put(CONTROLLERS_PREFIX + self.addr, AliveDoc(), self._own_lease)])
