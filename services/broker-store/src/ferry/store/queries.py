"""Lookups the remoting layer needs besides gets: a queue offset by store time, and one record
by its CommitLog offset (what an offset message id decodes to)."""

from __future__ import annotations

from ferry.protocol import record, record_layout
from ferry.protocol.errors import QueryNotFoundError
from ferry.protocol.messages import ConsumeQueueReply, CqEntry
from ferry.store.commit_log import CommitLog
from ferry.store.consume_queue import ConsumeQueue

_STORE_MS = record_layout.fields_at("STORETIMESTAMP")
_PHYS = record_layout.fields_at("PHYSICALOFFSET")
OFF_PHYS = record_layout.OFF_PHYS_OFFSET


def store_ms_at(log_: CommitLog, phys: int) -> int | None:
    """The store time of the record at phys; None when that part of the log is gone."""
    seg = log_.segment_at(phys)
    at = record_layout.OFF_STORE_TIMESTAMP
    if seg is None or phys + at + _STORE_MS.size > min(seg.end, log_.end):
        return None
    return int(_STORE_MS.unpack_from(seg.mm, phys - seg.start + at)[0])


def offset_by_time(log_: CommitLog, cq: ConsumeQueue | None, timestamp_ms: int) -> int:
    """The first queue offset stored at or after timestamp_ms; the max offset when none was.

    A binary search over the queue's entries on the records' store times, which grow along a
    queue (the store stamps them in arrival order)."""
    if cq is None:
        return 0
    lo, hi = cq.min_offset, cq.max_offset
    while lo < hi:
        mid = (lo + hi) // 2
        entry = cq.entry_at(mid)
        stored = store_ms_at(log_, entry[0]) if entry is not None else None
        if stored is None or stored < timestamp_ms:
            lo = mid + 1  # an entry whose record is gone counts as older than anything
        else:
            hi = mid
    return lo


def view_record(log_: CommitLog, phys: int) -> memoryview:
    """The stored record starting at phys; QueryNotFoundError when there is none (deleted by
    retention, past the end, or not a record boundary)."""
    seg = log_.segment_at(phys)
    limit = min(seg.end, log_.end) if seg is not None else 0
    if seg is None or phys < log_.min_offset or phys + record.FIXED_SIZE > limit:
        raise QueryNotFoundError(
            f"no message at CommitLog offset {phys} (the log holds {log_.min_offset}..{log_.end})"
        )
    pos = phys - seg.start
    size, magic = record.PREFIX.unpack_from(seg.mm, pos)
    # a record names its own offset: anything else is not the start of a record
    if (
        magic != record.MAGIC
        or size < record.FIXED_SIZE
        or phys + size > limit
        or _PHYS.unpack_from(seg.mm, pos + OFF_PHYS)[0] != phys
    ):
        raise QueryNotFoundError(f"no message starts at CommitLog offset {phys}")
    return log_.view(phys, phys + size)


def cq_entries(
    log_: CommitLog, cq: ConsumeQueue | None, index: int, count: int
) -> ConsumeQueueReply:
    """mqadmin queryCq: the queue's entries from `index` (count at most), each with the store
    time of its record (-1 when retention deleted it)."""
    if cq is None:
        return ConsumeQueueReply(min_offset=0, max_offset=0)
    start = max(index, cq.min_offset)
    entries = [
        CqEntry(start + i, phys, size, tags, store_ms_at(log_, phys) or -1)
        for i, (phys, size, tags) in enumerate(cq.entries(start, count))
    ]
    return ConsumeQueueReply(min_offset=cq.min_offset, max_offset=cq.max_offset, entries=entries)
