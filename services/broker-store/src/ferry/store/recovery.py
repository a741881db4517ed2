"""Start-up recovery: find the true log end, then bring the ConsumeQueues in line with it.

1. Scan records from the checkpoint's flushed offset (or the start of the last segment when
   there is no checkpoint), checking layout and CRC; the log ends before the first bad record.
2. Truncate the log there (the rest of that segment zeroed, later segments deleted).
3. Drop ConsumeQueue entries that point at or past the log end.
4. Re-dispatch records past the ConsumeQueues' durable point: a record whose queue offset is
   its queue's max offset gets its entry appended; entries already there are skipped.
A clean stop leaves the checkpoint at the log end, so a clean start scans nothing.
"""

from __future__ import annotations

import logging
import struct
from typing import NamedTuple

from ferry.protocol import record
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.names import check_topic
from ferry.store.checkpoint import CheckpointData
from ferry.store.commit_log import CQ_ENTRY, CommitLog
from ferry.store.consume_queue import ConsumeQueue, ConsumeQueueTable

log = logging.getLogger("ferry.store.recovery")

# QUEUEID @12, QUEUEOFFSET @20, STORETIMESTAMP @56 and BODYLEN @84 of a record
_FIELDS = struct.Struct(">12xi4xq28xq20xi")


class RecoveryReport(NamedTuple):
    log_end: int
    scanned_from: int
    dropped_entries: int
    redispatched: int


def find_log_end(log_: CommitLog, start: int) -> int:
    """The offset after the last good record at or after start."""
    segs = log_.segments
    if not segs:
        return log_.end
    if not segs[0].start <= start <= segs[-1].end:
        start = segs[-1].start
    at = start
    while True:
        seg = log_.segment_at(at)
        if seg is None:
            return at  # exactly at the end of the last segment
        pos = at - seg.start
        mm = seg.mm
        size, magic = record.PREFIX.unpack_from(mm, pos)
        if magic == record.BLANK_MAGIC and size == seg.size - pos:
            at = seg.end
            continue
        if magic != record.MAGIC:
            return at
        try:
            record.check_layout(mm, pos, seg.size)
        except record.RecordError:
            return at
        if not record.verify_crc(mm, pos, size):
            return at
        at += size


def recover(
    log_: CommitLog, queues: ConsumeQueueTable, checkpoint: CheckpointData | None
) -> RecoveryReport:
    """Runs after the log's segments and the queues' files are loaded."""
    if checkpoint is None:
        scan_from = log_.segments[-1].start if log_.segments else log_.end
        dispatch_from = log_.min_offset
    else:
        scan_from = checkpoint.log_flushed
        dispatch_from = checkpoint.cq_flushed
    end = find_log_end(log_, scan_from)
    log_.truncate(end)
    log_.flushed = min(checkpoint.log_flushed, end) if checkpoint else log_.min_offset
    dropped = sum(_trim_queue(cq, end) for cq in queues.queues.values())
    redispatched = _redispatch(log_, queues, max(min(dispatch_from, end), log_.min_offset), end)
    for cq in queues.queues.values():
        last = cq.last_entry()
        if last is not None and cq.last_store_ms == 0:
            cq.last_store_ms = _FIELDS.unpack_from(log_.view(last[0], last[0] + last[1]))[2]
    return RecoveryReport(end, scan_from, dropped, redispatched)


def _trim_queue(cq: ConsumeQueue, log_end: int) -> int:
    """Drops the queue's entries for records at or past the log end (they are in offset
    order, so only a tail can be affected)."""
    keep = cq.max_offset
    while keep > cq.min_offset:
        entry = next(cq.entries(keep - 1, 1), None)
        if entry is None or entry[0] + entry[1] <= log_end:
            break
        keep -= 1
    dropped = cq.max_offset - keep
    if dropped:
        log.warning("recovery: %s loses %d entries past the log end", cq.name, dropped)
        cq.truncate(keep)
    return dropped


def _redispatch(log_: CommitLog, queues: ConsumeQueueTable, start: int, end: int) -> int:
    count = 0
    for mm, pos, at, size in log_.iter_positions(start, end):
        queue_id, queue_offset, store_ms, body_len = _FIELDS.unpack_from(mm, pos)
        topic_at = pos + record.OFF_BODY + body_len
        topic = bytes(mm[topic_at + 1 : topic_at + 1 + mm[topic_at]]).decode(errors="replace")
        if queue_id < 0 or not _valid_topic(topic):
            log.error("recovery: record at %d names no valid topic and queue; not indexed", at)
            continue
        cq = queues.get_or_create(topic, queue_id)
        if queue_offset < cq.max_offset:
            continue
        if queue_offset > cq.max_offset:
            log.error(
                "recovery: record at %d is entry %d of %s but the queue has %d entries; "
                "not indexed",
                at,
                queue_offset,
                cq.name,
                cq.max_offset,
            )
            continue
        props = bytes(mm[topic_at + 3 + mm[topic_at] : pos + size])
        cq.append(CQ_ENTRY.pack(at, size, record.tags_code_of(props)), store_ms)
        count += 1
    return count


def _valid_topic(topic: str) -> bool:
    try:
        check_topic(topic)
    except InvalidParameterError:
        return False
    return True
