"""ReviveTable: pop checkpoints in flight and what settled their messages (no sockets).

Every checkpoint stored in the revive topic is kept here by its revive queue offset until each
of its messages is settled (acked, handed to a newer checkpoint by a change of invisible
time, or revived). The revive service fills it from the records it stores and, after a
restart, from the revive log; the oldest unsettled checkpoint's offset is where a restart
must read the log from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.protocol.errors import InvalidReceiptHandleError
from ferry.protocol.messages import PopCheckpoint, ReviveAck, ReviveAcks, ReviveRecord


def receipt_handle(ck: int, index: int, revive_at_ms: int) -> str:
    return f"{ck}.{index}.{revive_at_ms}"


def parse_handle(handle: str) -> tuple[int, int, int]:
    """(ck, index, revive_at_ms); InvalidReceiptHandleError for anything else."""
    parts = handle.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise InvalidReceiptHandleError(f"receipt handle {handle[:64]!r} is malformed")
    ck, index, revive_at = (int(p) for p in parts)
    return ck, index, revive_at


@dataclass
class InFlight:
    checkpoint: PopCheckpoint
    settled: set[int] = field(default_factory=set)
    reviving: set[int] = field(default_factory=set)  # copies being stored now

    def open_indexes(self) -> list[int]:
        n = len(self.checkpoint.queue_offsets)
        return [i for i in range(n) if i not in self.settled and i not in self.reviving]

    @property
    def done(self) -> bool:
        return len(self.settled) >= len(self.checkpoint.queue_offsets)


@dataclass
class GroupFigures:
    popped: int = 0
    acked: int = 0
    revived: int = 0
    dead: int = 0  # revived to the DLQ


class ReviveTable:
    def __init__(self) -> None:
        self.in_flight: dict[int, InFlight] = {}
        self.figures: dict[str, GroupFigures] = {}
        self.log_end = 0  # next revive queue offset after every record applied

    # ---- applying records (stored now, or read back from the log) ----

    def apply(self, offset: int, rec: ReviveRecord) -> None:
        """A record read back from the log, in log order."""
        if offset < self.log_end:
            return  # applied before (its checkpoint may be settled and gone since)
        self.add(offset, rec)

    def add(self, offset: int, rec: ReviveRecord) -> None:
        """A record just stored (puts in flight together may be answered in any order)."""
        self.log_end = max(self.log_end, offset + 1)
        if isinstance(rec, PopCheckpoint):
            self.in_flight[offset] = InFlight(rec)
            self._figures(rec.group).popped += len(rec.queue_offsets)
        elif isinstance(rec, ReviveAcks):
            for ck, index in rec.acked:
                self.settle(ReviveAck(ck=ck, index=index))
            for ck, index in rec.revived:
                self.settle(ReviveAck(ck=ck, index=index, revived=True))
        else:
            self.settle(rec)

    def settle(self, ack: ReviveAck) -> None:
        entry = self.in_flight.get(ack.ck)
        if entry is None or ack.index in entry.settled:
            return
        entry.settled.add(ack.index)
        entry.reviving.discard(ack.index)
        figures = self._figures(entry.checkpoint.group)
        if ack.revived:
            figures.revived += 1
        else:
            figures.acked += 1
        if entry.done:
            del self.in_flight[ack.ck]

    def count_dead(self, group: str) -> None:
        self._figures(group).dead += 1

    def _figures(self, group: str) -> GroupFigures:
        figures = self.figures.get(group)
        if figures is None:
            figures = self.figures[group] = GroupFigures()
        return figures

    # ---- receipt handles ----

    def check(self, handle: str, group: str, topic: str, now_ms: int) -> tuple[int, InFlight, int]:
        """The checkpoint (offset and entry) and index a handle names, if the message is
        still in flight under this handle; InvalidReceiptHandleError (saying why) if not."""
        ck, index, revive_at = parse_handle(handle)
        entry = self.in_flight.get(ck)
        if entry is None or not 0 <= index < len(entry.checkpoint.queue_offsets):
            raise InvalidReceiptHandleError(f"receipt handle {handle} is not in flight")
        c = entry.checkpoint
        if c.group != group or (c.topic != topic and c.queue_topic == c.topic):
            raise InvalidReceiptHandleError(
                f"receipt handle {handle} is not one of group {group!r} on topic {topic!r}"
            )
        if index in entry.settled or index in entry.reviving:
            raise InvalidReceiptHandleError(f"receipt handle {handle} was acked or changed")
        if revive_at != c.revive_at_ms or now_ms >= revive_at:
            raise InvalidReceiptHandleError(
                f"receipt handle {handle} is past its invisible time; the message is received again"
            )
        return ck, entry, index

    # ---- reviving ----

    def due(self, now_ms: int) -> list[tuple[int, int]]:
        """(ck, index) of messages past their invisible time, not settled nor being revived."""
        out: list[tuple[int, int]] = []
        for ck, entry in self.in_flight.items():
            if entry.checkpoint.revive_at_ms <= now_ms:
                out.extend((ck, i) for i in entry.open_indexes())
        return out

    def oldest(self) -> int:
        """Where a restart reads the revive log from: the oldest checkpoint in flight."""
        return min(self.in_flight, default=self.log_end)

    def in_flight_by_group(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for entry in self.in_flight.values():
            group = entry.checkpoint.group
            open_count = len(entry.checkpoint.queue_offsets) - len(entry.settled)
            counts[group] = counts.get(group, 0) + open_count
        return counts
