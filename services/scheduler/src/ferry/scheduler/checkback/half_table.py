"""The half messages still waiting for their transaction to end, and when each is due a check.

Plain state, no I/O: the checker feeds it what it reads in the three transaction queues (half
messages; op records and check-max copies, which end one; commit marks) and asks it which half
messages are due. A half message is due once it is older than the transaction timeout and its
last check is at least that old too (RocketMQ re-stores a half message at each check, so its
age restarts there); after `check_max` checks it is discarded instead.

The queues are read independently, so an end may be read before its half message: every half
message below `seen_end` (a CommitLog offset) has been read, since the half queue is in log
order; an end of one at or above it is kept in `early` until the half message comes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(slots=True)
class HalfMessage:
    phys_offset: int  # where the half record lies in the CommitLog: its identity
    size: int
    queue_offset: int  # in RMQ_SYS_TRANS_HALF_TOPIC
    store_ms: int
    group: str  # PGROUP: who is asked
    msg_id: str = ""
    traceparent: str = ""
    checks: int = 0
    last_check_ms: int = 0

    def to_row(self) -> list[Any]:
        return [
            self.phys_offset,
            self.size,
            self.queue_offset,
            self.store_ms,
            self.group,
            self.msg_id,
            self.traceparent,
            self.checks,
            self.last_check_ms,
        ]

    @classmethod
    def from_row(cls, row: list[Any]) -> HalfMessage:
        return cls(
            int(row[0]),
            int(row[1]),
            int(row[2]),
            int(row[3]),
            str(row[4]),
            str(row[5]),
            str(row[6]),
            int(row[7]),
            int(row[8]),
        )


class Mark(NamedTuple):
    """A commit mark (COMMITTING op record): the copy, if remoting stored it, lies after it."""

    op_offset: int  # the mark's own CommitLog offset
    store_ms: int  # its store time


@dataclass(frozen=True, slots=True)
class CheckPolicy:
    timeout_ms: int  # transactionTimeOut
    check_max: int  # transactionCheckMax


class HalfTable:
    def __init__(self) -> None:
        self._pending: dict[int, HalfMessage] = {}
        self._early: set[int] = set()  # ends read before their half message
        self.marks: dict[int, Mark] = {}  # half offset -> commit mark not followed by an end
        self.seen_end = 0  # every half message below this CommitLog offset has been read
        self.ended = 0  # half messages ended since start (committed, rolled back, discarded)

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, phys_offset: object) -> bool:
        return phys_offset in self._pending

    def get(self, phys_offset: int) -> HalfMessage | None:
        return self._pending.get(phys_offset)

    def add(self, half: HalfMessage) -> bool:
        """A half message read (again, after a restart: what is known is kept); False when
        its end was read first."""
        self.seen_end = max(self.seen_end, half.phys_offset + half.size)
        if half.phys_offset in self._early:
            self._early.discard(half.phys_offset)
            self.marks.pop(half.phys_offset, None)
            self.ended += 1
            return False
        self._pending.setdefault(half.phys_offset, half)
        return True

    def end(self, phys_offset: int) -> bool:
        """The half message at phys_offset ended; False if it was not pending."""
        self.marks.pop(phys_offset, None)
        if self._pending.pop(phys_offset, None) is not None:
            self.ended += 1
            return True
        if phys_offset >= self.seen_end:
            self._early.add(phys_offset)
        return False

    def mark(self, phys_offset: int, mark: Mark) -> None:
        """A commit of this half message started (the newest mark counts)."""
        if phys_offset in self._pending or phys_offset >= self.seen_end:
            self.marks[phys_offset] = mark

    def unmark(self, phys_offset: int) -> None:
        """No copy follows the mark: the half message is pending as before."""
        self.marks.pop(phys_offset, None)

    def forget_passed(self) -> None:
        """Ends and marks of what lies below seen_end but was never read as a half message
        (not one, or gone with retention) are dropped."""
        below = self.seen_end
        self._early = {o for o in self._early if o >= below}
        for offset in [o for o in self.marks if o < below and o not in self._pending]:
            del self.marks[offset]

    def has_ended(self, phys_offset: int) -> bool:
        """Read, and ended (as far as what was read says)."""
        if phys_offset in self._pending:
            return False
        return phys_offset < self.seen_end or phys_offset in self._early

    def due(
        self, now_ms: int, policy: CheckPolicy, busy: Iterable[int] = ()
    ) -> tuple[list[HalfMessage], list[HalfMessage]]:
        """(to check, to discard) now, oldest first; `busy` ones (a check under way) and
        marked ones (a commit under way, or its copy not looked for yet) are left alone."""
        skip = set(busy)
        checks: list[HalfMessage] = []
        discards: list[HalfMessage] = []
        for half in sorted(self._pending.values(), key=lambda h: h.phys_offset):
            if half.phys_offset in skip or half.phys_offset in self.marks:
                continue
            if now_ms - max(half.store_ms, half.last_check_ms) < policy.timeout_ms:
                continue
            (discards if half.checks >= policy.check_max else checks).append(half)
        return checks, discards

    def checked(self, phys_offset: int, now_ms: int) -> None:
        half = self._pending.get(phys_offset)
        if half is not None:
            half.checks += 1
            half.last_check_ms = now_ms

    def oldest_store_ms(self) -> int:
        return min((h.store_ms for h in self._pending.values()), default=0)

    def total_checks(self) -> int:
        return sum(h.checks for h in self._pending.values())

    # ---- saved with the queue offsets (progress.py) ----

    def dump(self) -> dict[str, Any]:
        return {
            "halves": [h.to_row() for h in self._pending.values()],
            "early": sorted(self._early),
            "marks": [[o, *m] for o, m in self.marks.items()],
            "seen_end": self.seen_end,
        }

    def load(self, saved: dict[str, Any]) -> None:
        for row in saved.get("halves", []):
            half = HalfMessage.from_row(row)
            self._pending[half.phys_offset] = half
        self._early = {int(o) for o in saved.get("early", [])}
        self.marks = {int(o): Mark(int(at), int(ms)) for o, at, ms in saved.get("marks", [])}
        self.seen_end = int(saved.get("seen_end", 0))
