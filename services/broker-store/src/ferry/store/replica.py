"""Raw CommitLog ranges for HA replication: what a master reads and a slave appends.

A slave's log is byte-identical to its master's at the same physical offsets, so offset
message ids stay valid on either. The master reads ranges as they lie, blank segment tails
included (read_raw); the slave checks every record of a range (framing, CRC, that it names its
own offset), writes the bytes where they were on the master and appends the ConsumeQueue
entries the records name (append_raw). digest() lets both sides compare their last bytes
before replicating, so a slave whose log diverged is refused instead of silently merged.
"""

from __future__ import annotations

import logging
import os
import zlib
from typing import NamedTuple

from ferry.protocol import record, record_layout
from ferry.protocol.errors import (
    DiskFullError,
    FerryError,
    IllegalStateError,
    InvalidParameterError,
)
from ferry.store.commit_log import CQ_ENTRY, CommitLog
from ferry.store.store import MessageStore

log = logging.getLogger("ferry.store.replica")

_FIELDS = record_layout.fields_struct(
    "QUEUEID", "QUEUEOFFSET", "PHYSICALOFFSET", "STORETIMESTAMP", "BODYLEN"
)
_TOPIC_LEN = record_layout.TOPIC_LEN_SIZE


class RawRange(NamedTuple):
    from_offset: int
    next_offset: int
    data: memoryview | bytes


class _Run:
    """Consecutive ConsumeQueue entries of one queue found in a range."""

    __slots__ = ("count", "entries", "first", "store_ms")

    def __init__(self, first: int) -> None:
        self.first = first  # queue offset of the first entry
        self.count = 0
        self.entries = bytearray()
        self.store_ms = 0


class _Plan(NamedTuple):
    # (log offset, payload start, payload stop, log end after the write)
    writes: list[tuple[int, int, int, int]]
    runs: dict[tuple[str, int], _Run]
    records: int
    next_offset: int


def read_raw(log_: CommitLog, from_offset: int, max_bytes: int) -> RawRange:
    """Whole records from from_offset within its segment, up to about max_bytes (at least
    one), with the segment's blank tail when the range reaches it."""
    lo, hi = log_.min_offset, log_.end
    if from_offset < lo or from_offset > hi:
        raise InvalidParameterError(f"offset {from_offset} is outside the log [{lo}, {hi})")
    if from_offset == hi:
        return RawRange(from_offset, from_offset, b"")
    seg = log_.segment_at(from_offset)
    if seg is None:
        raise InvalidParameterError(f"offset {from_offset} is outside the CommitLog")
    first = pos = from_offset - seg.start
    limit = min(seg.size, hi - seg.start)
    unpack = record.PREFIX.unpack_from
    mm = seg.mm
    while pos < limit:
        size, magic = unpack(mm, pos)
        if magic == record.BLANK_MAGIC:
            size = seg.size - pos
        elif magic != record.MAGIC or size < record.FIXED_SIZE:
            raise InvalidParameterError(f"offset {seg.start + pos} is not at a record boundary")
        if pos > first and pos - first + size > max_bytes:
            break
        pos += size
    return RawRange(from_offset, seg.start + pos, seg.view[first:pos])


def digest(log_: CommitLog, from_offset: int, to_offset: int) -> int:
    """CRC32 of the log bytes [from_offset, to_offset), which lie in one segment."""
    if not log_.min_offset <= from_offset <= to_offset <= log_.end:
        raise InvalidParameterError(
            f"[{from_offset}, {to_offset}) is not within the log [{log_.min_offset}, {log_.end})"
        )
    if from_offset == to_offset:
        return 0
    return zlib.crc32(log_.view(from_offset, to_offset))


def digest_start(log_: CommitLog, end: int, span: int) -> int:
    """Where a digest of the last `span` bytes before `end` starts: never before the segment
    holding byte end-1, so that a master that has that byte has the whole range."""
    if end <= log_.min_offset:
        return end
    seg_start = (end - 1) - (end - 1) % log_.segment_size
    return max(end - span, seg_start, log_.min_offset)


def append_raw(
    store: MessageStore, from_offset: int, data: bytes | memoryview
) -> tuple[int, int, set[tuple[str, int]]]:
    """Appends a master's raw range at the log end; returns the new log end, the number of
    records and the (topic, queue id) pairs that grew."""
    log_ = store.log
    if from_offset != log_.end:
        if not log_.segments and log_.end == 0 and from_offset % log_.segment_size == 0:
            # an empty slave of a master whose log no longer starts at 0
            log_.end = log_.flushed = from_offset
            log.info("empty log: replication starts at the master's offset %d", from_offset)
        else:
            raise IllegalStateError(
                f"a raw append at {from_offset}, but this log ends at {log_.end}"
            )
    view = memoryview(data)
    plan = _check(view, from_offset, log_.segment_size)
    # a slave's disk guard, as a master's put has: refuse the range whole rather than run out
    # of room in the middle of it; the slave asks again and catches up once space is freed
    store.retention.guard(log_.end)
    if store.retention.disk_full:
        raise DiskFullError(f"replication refused: {store.retention.refusal()}")
    for key, run in plan.runs.items():  # the queues' blocks first: a full disk writes nothing
        try:
            store.queues.get_or_create(*key).reserve(run.count)
        except OSError as exc:
            raise store.write_failed(f"ConsumeQueue {key[0]}/{key[1]}", exc) from None
    try:
        for at, start, stop, end_after in plan.writes:
            seg = log_._segment_for_write()  # creates the segment that starts at the log end
            if at != log_.end or at >= seg.end:
                raise IllegalStateError(f"log end {log_.end} is not where offset {at} goes")
            _pwrite(seg.fd, view[start:stop], at - seg.start)
            log_.end = end_after
    except (OSError, FerryError) as exc:
        # A new segment found no room after part of the range was written: take that part
        # back, or the log would hold records whose queue entries were never appended (and
        # the slave, asking again from its log end, would never add them).
        if log_.end != from_offset:
            log_.truncate(from_offset)
        if isinstance(exc, OSError):
            raise store.write_failed("the CommitLog", exc) from None
        raise
    grown: set[tuple[str, int]] = set()
    for key, run in plan.runs.items():
        cq = store.queues.get_or_create(*key)
        skip = cq.max_offset - run.first  # entries the queue has already
        if skip < 0:
            log.error(
                "%s: replicated records start at queue offset %d past the queue's end %d (the "
                "slave started after the master's retention); they are in the log, not queued",
                cq.name,
                run.first,
                cq.max_offset,
            )
        elif skip < run.count:
            cq.append(memoryview(run.entries)[skip * CQ_ENTRY.size :], run.store_ms)
            grown.add(key)
        store.last_store_ms = max(store.last_store_ms, run.store_ms)
    return plan.next_offset, plan.records, grown


def _check(view: memoryview, from_offset: int, seg_size: int) -> _Plan:
    """Validates a raw range before anything is written; the writes and queue entries."""
    writes: list[tuple[int, int, int, int]] = []
    runs: dict[tuple[str, int], _Run] = {}
    topics: dict[bytes, str] = {}
    pack_entry = CQ_ENTRY.pack
    records = 0
    prefix = record.PREFIX.unpack_from
    fields = _FIELDS.unpack_from
    crc_of = record.CRC.unpack_from
    crc32 = zlib.crc32
    at, i, n = from_offset, 0, len(view)
    run_at, run_start = at, 0
    while i < n:
        pos = at % seg_size
        if n - i < record.BLANK_MIN:
            raise InvalidParameterError(f"a range ends inside a record at offset {at}")
        size, magic = prefix(view, i)
        if magic == record.BLANK_MAGIC:
            if size != seg_size - pos or n - i < size:
                raise InvalidParameterError(
                    f"blank tail at {at} of {size} bytes does not end its segment "
                    "(is mappedFileSizeCommitLog the same on master and slave?)"
                )
            if i > run_start:
                writes.append((run_at, run_start, i, at))
            writes.append((at, i, i + record.BLANK_MIN, at + size))
            at += size
            i += size
            run_at, run_start = at, i
            continue
        if magic != record.MAGIC or size < record.FIXED_SIZE or n - i < size:
            raise InvalidParameterError(f"no whole record at offset {at}")
        if pos + size > seg_size - record.BLANK_MIN:
            raise InvalidParameterError(f"record at {at} crosses its segment's end")
        queue_id, queue_offset, phys, store_ms, body_len = fields(view, i)
        if phys != at:
            raise InvalidParameterError(f"record at {at} says it lies at {phys}")
        if crc_of(view, i + record_layout.OFF_CRC)[0] != crc32(
            view[i + record.CRC_START : i + size]
        ):
            raise InvalidParameterError(f"record at {at} fails its CRC")
        topic_at = i + record.OFF_BODY + body_len
        if body_len < 0 or topic_at + record_layout.TAIL_SIZE > i + size:
            raise InvalidParameterError(f"record at {at} has a bad body length")
        topic_len = view[topic_at]
        props_at = topic_at + _TOPIC_LEN + topic_len
        if props_at + record_layout.PROPS_LEN.size > i + size:
            raise InvalidParameterError(f"record at {at} has a bad topic length")
        raw_topic = bytes(view[topic_at + _TOPIC_LEN : props_at])
        topic = topics.get(raw_topic)
        if topic is None:
            topic = topics[raw_topic] = raw_topic.decode(errors="replace")
        run = runs.get((topic, queue_id))
        if run is None:
            run = runs[(topic, queue_id)] = _Run(queue_offset)
        elif queue_offset != run.first + run.count:
            raise InvalidParameterError(
                f"record at {at} is entry {queue_offset} of {topic}/{queue_id}, expected "
                f"{run.first + run.count}"
            )
        run.entries += pack_entry(
            at,
            size,
            record.tags_code_of(bytes(view[props_at + record_layout.PROPS_LEN.size : i + size])),
        )
        run.count += 1
        run.store_ms = store_ms
        records += 1
        at += size
        i += size
    if i > run_start:
        writes.append((run_at, run_start, i, at))
    return _Plan(writes, runs, records, at)


def _pwrite(fd: int, data: memoryview, pos: int) -> None:
    while data:
        done = os.pwrite(fd, data, pos)
        data = data[done:]
        pos += done
