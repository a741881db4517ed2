"""Controller mode on a SYNC_MASTER: RocketMQ 5's allAckInSyncStateSet and minInSyncReplicas.

The broker agent hands remoting the group's in-sync set with every write lease it grants
(the controller's set joined with the one the master just proposed: either may be the set the
controller elects from). Remoting then:

- minInSyncReplicas=N: refuses a write before it is stored while fewer than N replicas, this
  master included, are in the set (InSyncReplicasNotEnoughError, retriable; nothing is
  written, so nothing is acknowledged and nothing stored is lost);
- allAckInSyncStateSet=true: asks the ha-replicator to answer a stored send SEND_OK only once
  EVERY slave of the set acked its end (ha_wait.py); without it, once any one slave OF THE
  SET acked (a slave outside the set cannot be elected, so its ack keeps nothing). Either way
  readers stop where the whole set holds the log. A changed set is handed to the
  ha-replicator at once, so a wait that only lacked a slave just dropped from the set is
  answered without waiting for the next send.

Without controller mode, or on an ASYNC_MASTER, neither key is enforced (as in RocketMQ).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ferry.protocol.errors import InSyncReplicasNotEnoughError, InvalidParameterError
from ferry.protocol.messages import GrantWriteLeaseRequest
from ferry.remoting.calls import Caller, Handler, checked_first
from ferry.runtime.config import BrokerConfig

MAX_REPLICAS = 64  # ids a grant's set may name (a bound on bad input, not a design limit)


class InSyncReplicas:
    def __init__(self, config: BrokerConfig) -> None:
        self.enforced = config.enable_controller_mode and config.broker_role == "SYNC_MASTER"
        self.all_ack = config.all_ack_enforced
        self.minimum = config.min_in_sync_replicas
        self.own_id = config.broker_id  # the replica id in controller mode
        self.broker_name = config.broker_name
        self.ids: list[int] = []
        self.refused = 0
        # told of a changed set (the slaves a write waits for): ha_wait's
        self._listeners: list[Callable[[list[int]], None]] = []

    def count(self) -> int:
        """Replicas in sync, this master always among them."""
        return len(set(self.ids) | {self.own_id})

    def slaves(self) -> list[int]:
        return sorted(set(self.ids) - {self.own_id})

    def wait_for(self) -> list[int] | None:
        """The slaves of the set a stored send waits for (all of them with
        allAckInSyncStateSet, else any one: any_one()); None without controller mode: any
        one slave in sync."""
        return self.slaves() if self.enforced else None

    def any_one(self) -> bool:
        return not self.all_ack

    def listen(self, on_change: Callable[[list[int]], None]) -> None:
        """on_change(slaves) is told of every changed set from now on."""
        self._listeners.append(on_change)

    def update(self, ids: list[int]) -> None:
        old = self.slaves()
        self.ids = sorted(ids)
        if self.enforced and self.slaves() != old:
            for on_change in self._listeners:
                on_change(self.slaves())

    def check(self) -> None:
        if self.enforced and self.count() < self.minimum:
            self.refused += 1
            raise InSyncReplicasNotEnoughError(
                f"in-sync replicas not enough: have {self.count()}, need {self.minimum} "
                f"(minInSyncReplicas) on broker {self.broker_name}; nothing was stored. Send "
                "again once a slave is back in sync",
                retriable=True,
            )

    def guard(self, handler: Handler) -> Handler:
        """handler, refused before anything is written while the set is too small."""
        return checked_first(self.check, handler) if self.enforced else handler

    def with_grant(self, grant: Handler) -> Handler:
        """The write lease's grant handler, which also takes the set it carries."""

        def granted(req: GrantWriteLeaseRequest, call: Caller) -> Any:
            if len(req.sync_state_set) > MAX_REPLICAS:
                raise InvalidParameterError(
                    f"an in-sync set of {len(req.sync_state_set)} replicas: at most {MAX_REPLICAS}"
                )
            answer = grant(req, call)  # a stale epoch's grant raises: its set is not taken
            self.update(list(req.sync_state_set))
            return answer

        return granted
