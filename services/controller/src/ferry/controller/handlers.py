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
from typing import Any

import msgspec

from ferry.controller import election
from ferry.controller.config import ControllerConfig
from ferry.controller.election import Candidate
from ferry.controller.etcd_state import (
    Etcd,
    EtcdRejectedError,
    absent,
    mod_revision_is,
    put,
)
from ferry.controller.groups import (
    candidates,
    check_addr,
    check_group_names,
    group_view,
    known_epoch,
    until_done,
)
from ferry.controller.model import (
    CONTROLLERS_PREFIX,
    AliveDoc,
    Group,
    ReplicaDoc,
    StateDoc,
    alive_key,
    replica_key,
    state_key,
)
from ferry.protocol.errors import (
    ControllerNeedToRegisterError,
    InvalidParameterError,
)
from ferry.protocol.messages import (
    MASTER_ROLE,
    ControllerHeartbeatReply,
    ControllerHeartbeatRequest,
    ControllerRegisterBrokerReply,
    ControllerRegisterBrokerRequest,
    EpochEntry,
)
from ferry.runtime.throttled_log import ThrottledLog

log = logging.getLogger("ferry.controller")

CONTROLLER_TTL_S = 10  # a controller's own registration (getControllerMetaData)
MAX_REMEMBERED = 10_000  # lease ids and logged groups kept in memory, at most


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
            self.elect(group, preferred=state.handover_to if state else 0)

    def elect(self, group: Group, preferred: int = 0, forced: int = 0) -> StateDoc | None:
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

    def _announce(self) -> None:
        """This controller's key under /ferry-controllers/, on a lease of its own."""
        if self._own_lease and self.etcd.keepalive(self._own_lease) > 0:
            return
        self._own_lease = self.etcd.grant(CONTROLLER_TTL_S)
        self.etcd.txn([], [put(CONTROLLERS_PREFIX + self.addr, AliveDoc(), self._own_lease)])
