"""Who becomes master, and the state a won election writes: pure functions, no etcd.

The rule (docs/architecture.md, controller), RocketMQ 5's order: among live replicas of the
sync state set, the one that knows the newest epoch, then the largest max offset, then the
highest priority (lowest brokerElectionPriority number), then the lowest id. Data before
priority: without allAckInSyncStateSet a send is acknowledged once any one slave of the set
holds it, so only the replica holding the most may be elected without losing it. An
out-of-sync replica never wins, unless unclean election is allowed and no in-sync replica is
alive: then the live replica ranked first by the same order wins. A group that
never had a master elects among every live replica (nobody is behind anybody yet).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ferry.controller.model import ReplicaDoc, StateDoc


@dataclass(frozen=True)
class Candidate:
    replica_id: int
    priority: int
    max_offset: int
    epoch: int = 0  # the last epoch the replica knows


@dataclass(frozen=True)
class Choice:
    replica_id: int
    clean: bool  # False: an out-of-sync replica, elected because unclean election is allowed


def _rank(c: Candidate) -> tuple[int, int, int, int]:
    return (-c.epoch, -c.max_offset, c.priority, c.replica_id)


def choose_master(
    alive: Mapping[int, Candidate],
    sync_state_set: Collection[int],
    *,
    unclean: bool,
    first: bool = False,
    preferred: int = 0,
) -> Choice | None:
    """The replica to elect, or None when no live replica may be master.

    first: the group never had a master, every live replica is a candidate.
    preferred: electMaster's target, chosen when it is a candidate."""
    if first:
        pool = list(alive.values())
    else:
        pool = [c for rid, c in alive.items() if rid in sync_state_set]
    if pool:
        by_id = {c.replica_id: c for c in pool}
        if preferred in by_id:
            return Choice(preferred, True)
        return Choice(min(pool, key=_rank).replica_id, True)
    if unclean and alive:
        if preferred in alive:
            return Choice(preferred, False)
        return Choice(min(alive.values(), key=_rank).replica_id, False)
    return None


def elected_state(
    old: StateDoc | None, winner: Candidate, replica: ReplicaDoc, known_epoch: int = 0
) -> StateDoc:
    """The state after `winner` won: a new epoch above every epoch known (the old state's
    and any replica's, so that epochs never repeat even after the state was cleaned), a sync
    state set of the new master alone, and the epoch's start at its max offset."""
    base = old or StateDoc()
    epoch = max(base.epoch, known_epoch, winner.epoch) + 1
    return StateDoc(
        master_id=winner.replica_id,
        master_addr=replica.addr,
        master_ha_addr=replica.ha_addr,
        epoch=epoch,
        sync_state_set=[winner.replica_id],
        sync_state_set_epoch=base.sync_state_set_epoch + 1,
        epochs=[*base.epochs, (epoch, winner.max_offset)],
        handover_to=0,
    )


def sync_state_set_problem(
    state: StateDoc, master_id: int, proposed: Collection[int], registered: Collection[int]
) -> str | None:
    """Why the master's proposed in-sync set cannot be stored, or None."""
    if master_id not in proposed:
        return f"the sync state set {sorted(proposed)} leaves out the master {master_id}"
    unknown = sorted(set(proposed) - set(registered))
    if unknown:
        return f"the sync state set names replicas never registered: {unknown}"
    if state.master_id != master_id:
        return f"replica {master_id} is not the master (replica {state.master_id} is)"
    return None


def with_sync_state_set(state: StateDoc, proposed: Collection[int]) -> StateDoc | None:
    """The state with a new in-sync set (its epoch bumped), or None when nothing changes."""
    members = sorted(set(proposed))
    if members == sorted(state.sync_state_set):
        return None
    return StateDoc(
        master_id=state.master_id,
        master_addr=state.master_addr,
        master_ha_addr=state.master_ha_addr,
        epoch=state.epoch,
        sync_state_set=members,
        sync_state_set_epoch=state.sync_state_set_epoch + 1,
        epochs=list(state.epochs),
        handover_to=state.handover_to,
    )
