"""Controller mode's write lease: until when a master's process may write, and for which epoch.

The broker agent grants it after each heartbeat the controller answered with "you are
master", until a CLOCK_MONOTONIC time of this host counted from when the heartbeat was SENT,
which always ends before the controller may elect another master. Remoting holds one (it
acknowledges nothing without it) and so does the store (it appends nothing without it, whoever
asks: remoting, the scheduler, the check-back): a tree paused past its lease and resumed
writes nothing before the controller confirmed its role again. Without controller mode, or on
a slave, the lease is not enforced.
"""

from __future__ import annotations

import time

from ferry.protocol.errors import ServiceNotAvailableError


class Lease:
    def __init__(self, enforced: bool) -> None:
        self.enforced = enforced
        self.until = 0.0
        self.epoch = 0

    def grant(self, until: float, epoch: int) -> None:
        """A grant of an older epoch than one already taken is refused: the agent of a
        replaced master must not extend a lease the newer epoch revoked."""
        if epoch < self.epoch:
            raise ServiceNotAvailableError(
                f"lease of epoch {epoch} refused: this broker is at epoch {self.epoch}"
            )
        self.epoch = epoch
        self.until = until

    def lapsed(self) -> bool:
        return self.enforced and time.monotonic() >= self.until

    def remaining_ms(self) -> int:
        return max(0, int((self.until - time.monotonic()) * 1000))
