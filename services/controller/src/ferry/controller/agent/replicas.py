"""Controller mode's broker side: the agent of a `ferry serve broker` tree, which speaks for its
broker group's replica to the controller (RocketMQ 5's ReplicasManager).

Every brokerHeartbeatInterval it reads its store's log end (and, as master, which slaves are in
sync), heartbeats to the controller and follows the answer:

- named master: its first answer in an epoch restarts the role-bearing services as master (the
  epoch file then holds the group's epochs); later answers renew the write lease of remoting
  (which acknowledges nothing without it) and of the store (which appends nothing without
  it), until the heartbeat's SEND time plus the granted lease_ms (ferry.runtime.lease);
- another replica named master: a master revokes its leases at once; then it rejoins as a
  slave of the new master: it asks its store to cut the CommitLog where its history and the
  group's part (epoch_file.truncate_point) at its next start, whatever the log's end looked
  like a moment before (a put taken meanwhile is cut too), and restarts those services as a
  slave, so that nothing past the cut is ever served;
- a slave whose master refuses it (HA_LOG_DIVERGED: bytes that differ from the master's)
  rebuilds itself: it cuts its log back to the start of the segment where the compared bytes
  begin (a record boundary), one segment further each time, and replicates again;
- no answer: nothing; the lease runs out by itself, so an isolated master stops taking writes
  before the controller may elect another.

Services take a role only at start: the tree's supervisor restarts them with new keys when the
agent asks (tree.Tree.reconfigure). The index serves any role and keeps running.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ferry.controller.agent.tree import Tree
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import (
    AnyRequest,
    ControllerHeartbeatReply,
    ControllerHeartbeatRequest,
    ControllerRegisterBrokerReply,
    ControllerRegisterBrokerRequest,
    EpochEntry,
    ErrorReply,
    GrantWriteLeaseRequest,
    HaStatusReply,
    HaStatusRequest,
    StoreStatusReply,
    StoreStatusRequest,
    TreeProcess,
)
from ferry.protocol.messages.controller import MASTER_ROLE, SLAVE_ROLE
from ferry.runtime import epoch_file
from ferry.runtime.config import BrokerConfig

log = logging.getLogger("ferry.broker_agent")

# what a role change restarts (the index follows the store whatever the role)
ROLE_SERVICES = ("broker-store", "scheduler", "checkback", "ha-replicator", "broker-remoting")
# What a new master needs to take writes; the scheduler and check-back follow once remoting
# is back (five processes starting at once on a small host took seconds longer)
FIRST_ON_PROMOTION = ("broker-store", "ha-replicator", "broker-remoting")
ASK_TIMEOUT_MS = 1000
NO_END = 1 << 62  # "wherever the log ends" for truncate_point: the cut is not clamped to it


def entries(epochs: Sequence[EpochEntry]) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in epochs]


class BrokerAgent:
    """One round at a time (beat), every brokerHeartbeatInterval from the agent's loop."""

    def __init__(
        self, config: BrokerConfig, tree: Tree, say: Callable[[str], None] = print
    ) -> None:
        self.config = config
        self.tree = tree  # started: its endpoints are known
        self._say = say
        self.root = Path(config.store_root).resolve()
        self.replica_id = config.broker_id
        # the role it serves as master: broker.conf's, or SYNC_MASTER where that says SLAVE
        self.master_role = config.broker_role if config.broker_role != "SLAVE" else "SYNC_MASTER"
        self.role = SLAVE_ROLE  # `ferry serve broker` starts every replica as a slave
        mine = epoch_file.load(self.root)
        self.epoch = mine[-1][0] if mine else 0
        self.master_ha = ""
        self.registered = False
        self.lease_until = 0.0
        self.beats = 0
        self._caught_up: dict[int, float] = {}  # slave id -> when it last was at the log end
        self._controllers = [a.strip() for a in config.controller_addr.split(";") if a.strip()]
        self._next = 0  # the controller asked first (the last one that answered)
        # a promotion's second half (_promote_rest), and the remoting (its pid) it waits to
        # see replaced
        self._promote_later: list[str] = []
        self._old_remoting: int | None = None
        self._rebuilds = 0  # cuts in a row to rebuild a diverged slave

    def round(self) -> None:
        """beat(), whatever it raises: the agent must outlive any one bad answer."""
        try:
            self.beat()
        except Exception:
            log.exception("broker agent: a heartbeat round failed")

    # ---- one round ----

    def beat(self) -> None:
        self._promote_rest()
        end = self._log_end()
        if end is None:
            return  # the store restarts: nothing true to report
        if not self.registered:
            self._register(end)
            return
        if self.role == SLAVE_ROLE and self._rebuild_if_diverged(end):
            return
        in_sync = self._in_sync() if self.role == MASTER_ROLE else []
        sent_at = time.monotonic()
        reply = self._ask(
            ControllerHeartbeatRequest(
                cluster=self.config.broker_cluster_name,
                broker_name=self.config.broker_name,
                replica_id=self.replica_id,
                addr=self.tree.broker_addr,
                ha_addr=self.tree.ha_addr,
                max_offset=end,
                epoch=self.epoch,
                role=self.role,
                sync_state_set=in_sync,
            )
        )
        if isinstance(reply, ControllerHeartbeatReply):
            self.beats += 1
            self._follow(reply, sent_at, end, in_sync)
        elif (
            isinstance(reply, ErrorReply)
            and reply.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        ):
            self.registered = False  # its metadata was cleaned: register again

    def _register(self, end: int) -> None:
        reply = self._ask(
            ControllerRegisterBrokerRequest(
                cluster=self.config.broker_cluster_name,
                broker_name=self.config.broker_name,
                replica_id=self.replica_id,
                addr=self.tree.broker_addr,
                ha_addr=self.tree.ha_addr,
                priority=self.config.broker_election_priority,
                max_offset=end,
                epochs=[EpochEntry(e, s) for e, s in epoch_file.load(self.root)],
            )
        )
        if isinstance(reply, ControllerRegisterBrokerReply):
            self.registered = True
            self._say(f"registered with the controller as replica {self.replica_id}")

    def _follow(
        self, reply: ControllerHeartbeatReply, sent_at: float, end: int, in_sync: list[int]
    ) -> None:
        if reply.master_id == self.replica_id:
            if self.role != MASTER_ROLE or reply.epoch != self.epoch:
                self._become_master(reply)
            elif reply.lease_ms > 0:
                # the controller's set and the one just proposed: either may be elected from,
                # so remoting's minInSyncReplicas and allAckInSyncStateSet count them both
                both = sorted(set(reply.sync_state_set) | set(in_sync))
                self._grant(sent_at + reply.lease_ms / 1000, reply.epoch, both)
            return
        if not reply.master_id:
            return  # no master yet: the controller elects one
        if self.role == MASTER_ROLE:
            self._grant(0.0, reply.epoch)  # fenced at once, before anything else
            self._become_slave(reply, end)
        elif reply.master_ha_addr != self.master_ha or reply.epoch != self.epoch:
            self._become_slave(reply, end)

    # ---- role changes ----

    def _become_master(self, reply: ControllerHeartbeatReply) -> None:
        epoch_file.save(self.root, entries(reply.epochs))
        self.role, self.epoch, self.master_ha = MASTER_ROLE, reply.epoch, ""
        self.lease_until = 0.0
        self._caught_up.clear()
        self._say(
            f"elected master of {self.config.broker_name} at epoch {reply.epoch}: restarting "
            f"{', '.join(ROLE_SERVICES)} as {self.master_role}"
        )
        old = self._remoting()
        self._old_remoting = old.pid if old is not None else None
        for name in FIRST_ON_PROMOTION:
            self.tree.reconfigure(name, {"brokerRole": self.master_role})
        self._promote_later = [n for n in ROLE_SERVICES if n not in FIRST_ON_PROMOTION]

    def _remoting(self) -> TreeProcess | None:
        status = self.tree.status()
        if status is None:
            return None
        return next((p for p in status.processes if p.name == "broker-remoting"), None)

    def _promote_rest(self) -> None:
        """The rest of a promotion, once remoting runs as master again (or at once when this
        replica stopped being master meanwhile: _become_slave restarts them anyway)."""
        if not self._promote_later or self.role != MASTER_ROLE:
            self._promote_later = []
            return
        status = self.tree.status()
        if status is None:
            return  # the supervisor did not answer: the next round asks again
        remoting = next((p for p in status.processes if p.name == "broker-remoting"), None)
        if remoting is not None and (
            remoting.pid == self._old_remoting or not (remoting.announced and remoting.alive)
        ):
            return  # the supervisor has not restarted it yet, or it is not ready
        for name in self._promote_later:
            self.tree.reconfigure(name, {"brokerRole": self.master_role})
        self._promote_later = []

    def _become_slave(self, reply: ControllerHeartbeatReply, end: int) -> None:
        group = entries(reply.epochs)
        mine = epoch_file.load(self.root)
        # `end` was read a moment ago: a master's store may have taken a put since (one that
        # was in its socket when it was paused), and a slave's store may have taken the old
        # master's bytes. So the cut is asked for wherever the histories part, not only when
        # the log looked longer than that, and the store applies it at its start.
        cut = epoch_file.truncate_point(mine, group, NO_END)
        new_epoch = reply.epoch != self.epoch or self.role == MASTER_ROLE
        cutting = cut < NO_END and new_epoch
        if cutting:
            epoch_file.request_cut(self.root, cut)
            if cut < end:
                self._say(
                    f"cutting the CommitLog from {end} to {cut}: the group's epoch "
                    f"{reply.epoch} does not hold those bytes"
                )
        kept = min(cut, end) if cut < NO_END else end
        epoch_file.save(self.root, [(e, s) for e, s in group if s <= kept])
        # a slave already: only replication follows the new master (and the store, to cut)
        names: tuple[str, ...] = ROLE_SERVICES
        if self.role == SLAVE_ROLE:
            names = ("broker-store", "ha-replicator") if cutting else ("ha-replicator",)
        self.role, self.epoch, self.master_ha = SLAVE_ROLE, reply.epoch, reply.master_ha_addr
        self.lease_until = 0.0
        self._say(
            f"slave of replica {reply.master_id} ({reply.master_ha_addr}) at epoch {reply.epoch}"
        )
        settings = {"brokerRole": "SLAVE", "haMasterAddress": reply.master_ha_addr}
        for name in names:
            self.tree.reconfigure(name, settings)

    # ---- the group's own services ----

    def _grant(self, until: float, epoch: int, sync_state_set: list[int] | None = None) -> None:
        """The store first: a revocation fences appends before acknowledgements."""
        grant = GrantWriteLeaseRequest(
            until_monotonic=until, epoch=epoch, sync_state_set=sync_state_set or []
        )
        self._local(self.tree.store_endpoint, grant)
        answer = self._local(self.tree.broker_addr, grant)
        if answer is not None:
            self.lease_until = until

    def _rebuild_if_diverged(self, end: int) -> bool:
        """A slave its master refuses (diverged bytes) cuts its log back and replicates
        again, a segment further back each time, instead of staying out of sync."""
        answer = self._local(self.tree.ha_addr, HaStatusRequest())
        if not isinstance(answer, HaStatusReply) or not answer.error:
            if isinstance(answer, HaStatusReply) and answer.connected:
                self._rebuilds = 0
            return False
        segment = self.config.mapped_file_size_commit_log
        start = (min(answer.diverged_from, end) // segment) * segment
        cut = max(0, start - self._rebuilds * segment)
        self._rebuilds += 1
        epoch_file.request_cut(self.root, cut)
        epoch_file.save(self.root, [(e, s) for e, s in epoch_file.load(self.root) if s <= cut])
        self._say(
            f"rebuilding: the master refused this slave ({answer.error}); cutting the "
            f"CommitLog from {end} to {cut} and replicating again"
        )
        settings = {"brokerRole": "SLAVE", "haMasterAddress": self.master_ha}
        for name in ("broker-store", "ha-replicator"):
            self.tree.reconfigure(name, settings)
        return True

    def _log_end(self) -> int | None:
        answer = self._local(self.tree.store_endpoint, StoreStatusRequest())
        return answer.max_offset if isinstance(answer, StoreStatusReply) else None

    def _in_sync(self) -> list[int]:
        """This master and the slaves that were caught up with its log end at some look
        within the last haMaxTimeSlaveNotCatchup ms (RocketMQ's lastCatchupTime rule)."""
        answer = self._local(self.tree.ha_addr, HaStatusRequest())
        now = time.monotonic()
        if isinstance(answer, HaStatusReply):
            for slave in answer.slaves:
                if slave.in_sync and slave.acked_offset >= answer.master_max_offset:
                    self._caught_up[slave.broker_id] = now
        window = self.config.ha_max_time_slave_not_catchup / 1000
        ids = {i for i, at in self._caught_up.items() if now - at <= window}
        return sorted(ids | {self.replica_id})

    def _local(self, endpoint: str, request: AnyRequest) -> Any:
        return self.tree.call(endpoint, request)

    def _ask(self, request: AnyRequest) -> Any:
        """The first controller of controllerAddr that answers (the last good one first)."""
        count = len(self._controllers)
        for i in range(count):
            index = (self._next + i) % count
            with self.tree.client(self._controllers[index]) as client:
                answer = client.call(request, ASK_TIMEOUT_MS)
            if answer is None:
                continue
            reply = answer[0]
            if isinstance(reply, ErrorReply) and reply.code == ResponseCode.CONTROLLER_NOT_LEADER:
                continue  # that controller lost etcd: another may have it
            self._next = index
            return reply
        return None
