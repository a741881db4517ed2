"""Start-up recovery: find the true log end, then bring the ConsumeQueues in line with it.

1. Scan records from the checkpoint's flushed offset (from the log's start when there is no
   checkpoint), checking layout, CRC and that each record names its own offset; the log ends
   before the first bad record.
2. Truncate the log there (the rest of that segment zeroed, later segments deleted).
3. Drop ConsumeQueue entries that point at or past the log end.
4. Re-dispatch records past the ConsumeQueues' durable point: a record whose queue offset is
   its queue's max offset gets its entry appended; entries already there are skipped.
5. Move each queue's min offset past entries pointing below the log's start (retention).
A clean stop leaves the checkpoint at the log end, so a clean start scans nothing.
"""

from __future__ import annotations

import logging
import zlib
from typing import Any, NamedTuple

from ferry.protocol import record, record_layout
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.names import check_topic
from ferry.store.checkpoint import CheckpointData
from ferry.store.commit_log import CQ_ENTRY, CommitLog
from ferry.store.consume_queue import ConsumeQueue, ConsumeQueueTable

log = logging.getLogger("ferry.store.recovery")

_FIELDS = record_layout.fields_struct("QUEUEID", "QUEUEOFFSET", "STORETIMESTAMP", "BODYLEN")
# what the scan checks first
_SCAN = record_layout.fields_struct("TOTALSIZE", "MAGIC", "PHYSICALOFFSET", "BODYLEN")
_PROPLEN = record_layout.PROPS_LEN
_TOPIC_LEN = record_layout.TOPIC_LEN_SIZE
_TAIL = record_layout.TAIL_SIZE
_MISSING = object()


class RecoveryReport(NamedTuple):
    log_end: int
    scanned_from: int
    dropped_entries: int
    redispatched: int
    cut_tail: bool = False  # bytes past the last good record were discarded (a torn write)


def find_log_end(log_: CommitLog, start: int) -> int:
    """The offset after the last good record at or after start: each record's framing (sizes
    agree, magic right, as record.check_layout), its own offset and its CRC are checked.
    Inlined, because it runs for every record written since the checkpoint."""
    segs = log_.segments
    if not segs:
        return log_.end
    if start < segs[0].start:  # the checkpoint lags behind retention
        start = segs[0].start
    elif start > segs[-1].end:  # segments the checkpoint knew are gone: check the last one
        start = segs[-1].start
    unpack = _SCAN.unpack_from
    unpack_props = _PROPLEN.unpack_from
    crc32 = zlib.crc32
    unpack_crc = record.CRC.unpack_from
    magic_ok, blank, fixed, off_body = (
        record.MAGIC,
        record.BLANK_MAGIC,
        record.FIXED_SIZE,
        record.OFF_BODY,
    )
    topic_len, tail, props_len, off_crc = _TOPIC_LEN, _TAIL, _PROPLEN.size, record_layout.OFF_CRC
    at = start
    while True:
        seg = log_.segment_at(at)
        if seg is None:
            return at  # exactly at the end of the last segment
        mm, view, base, seg_size = seg.mm, seg.view, seg.start, seg.size
        pos = at - base
        while pos < seg_size:
            if pos + off_body <= seg_size:
                size, magic, phys, body_len = unpack(mm, pos)
            elif pos + record.BLANK_MIN <= seg_size:  # room for a blank tail only
                (size, magic), phys, body_len = record.PREFIX.unpack_from(mm, pos), -1, -1
            else:
                return base + pos
            if magic != magic_ok:
                if magic == blank and size == seg_size - pos:
                    break  # the segment's tail: go on in the next one
                return base + pos
            end = pos + size
            topic_at = pos + off_body + body_len
            if (
                size < fixed
                or end > seg_size
                or body_len < 0
                or topic_at + tail > end
                or phys != base + pos
            ):
                return base + pos
            props_at = topic_at + topic_len + mm[topic_at]
            if (
                props_at + props_len > end
                or props_at + props_len + unpack_props(mm, props_at)[0] != end
            ):
                return base + pos
            if unpack_crc(mm, pos + off_crc)[0] != crc32(view[pos + record.CRC_START : end]):
                return base + pos
            pos = end
        at = seg.end


def recover(
    log_: CommitLog,
    queues: ConsumeQueueTable,
    checkpoint: CheckpointData | None,
    truncate_to: int | None = None,
) -> RecoveryReport:
    """Runs after the log's segments and the queues' files are loaded. truncate_to: the log
    ends there at the latest (controller mode: a broker rejoining as a slave drops what its
    group did not keep, ferry.runtime.epoch_file)."""
    if checkpoint is None:  # nothing is known to be good: verify everything
        scan_from = dispatch_from = log_.min_offset
    else:
        scan_from = checkpoint.log_flushed
        dispatch_from = checkpoint.cq_flushed
    end = find_log_end(log_, scan_from)
    if truncate_to is not None and truncate_to < end:
        log.warning(
            "recovery: the log is cut at %d as asked (%d bytes its group did not keep)",
            truncate_to,
            end - truncate_to,
        )
        end = max(truncate_to, log_.min_offset)
    cut = _has_bytes_past(log_, end)
    if cut and truncate_to is None:
        log.warning("recovery: the log's tail past offset %d is torn or corrupt: cut there", end)
    log_.truncate(end)
    log_.flushed = min(checkpoint.log_flushed, end) if checkpoint else log_.min_offset
    dropped = sum(_trim_queue(cq, end) for cq in queues.queues.values())
    redispatched = _redispatch(log_, queues, max(min(dispatch_from, end), log_.min_offset), end)
    dropped += queues.drop_below(log_.min_offset)
    for cq in queues.queues.values():
        last = cq.last_entry()
        if last is not None and cq.last_store_ms == 0:
            cq.last_store_ms = _FIELDS.unpack_from(log_.view(last[0], last[0] + last[1]))[2]
    return RecoveryReport(end, scan_from, dropped, redispatched, cut)


def _has_bytes_past(log_: CommitLog, end: int) -> bool:
    """Whether anything was written past `end`: at end itself, or at the start of a later
    segment (a segment created just before a crash may hold nothing)."""
    for seg in log_.segments:
        if seg.end <= end:
            continue
        pos = max(end - seg.start, 0)
        if any(seg.view[pos : pos + record.PREFIX.size]):
            return True
    return False


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
    """Appends the missing ConsumeQueue entries of the (verified) records in [start, end)."""
    count = 0
    by_key: dict[tuple[bytes, int], Any] = {}  # (topic, queue id) -> queue, None if invalid
    unpack = _FIELDS.unpack_from
    prefix = record.PREFIX.unpack_from
    at = start
    while at < end:
        seg = log_.segment_at(at)
        if seg is None:
            break
        mm, base = seg.mm, seg.start
        pos, stop = at - base, min(seg.end, end) - base
        while pos < stop:
            size, magic = prefix(mm, pos)
            if magic != record.MAGIC:
                break  # the blank tail (everything here was verified)
            queue_id, queue_offset, store_ms, body_len = unpack(mm, pos)
            topic_at = pos + record.OFF_BODY + body_len
            topic_start = topic_at + _TOPIC_LEN
            key = (mm[topic_start : topic_start + mm[topic_at]], queue_id)
            cq = by_key.get(key, _MISSING)
            if cq is _MISSING:
                cq = by_key[key] = _queue_of(queues, key[0], queue_id, base + pos)
            if cq is not None and queue_offset >= cq.max_offset:
                if queue_offset > cq.max_offset:
                    log.error(
                        "recovery: record at %d is entry %d of %s but the queue has %d "
                        "entries; not indexed",
                        base + pos,
                        queue_offset,
                        cq.name,
                        cq.max_offset,
                    )
                else:
                    props = mm[topic_at + _TAIL + mm[topic_at] : pos + size]
                    cq.append(CQ_ENTRY.pack(base + pos, size, record.tags_code_of(props)), store_ms)
                    count += 1
            pos += size
        at = seg.end
    return count


def _queue_of(
    queues: ConsumeQueueTable, topic_raw: bytes, queue_id: int, at: int
) -> ConsumeQueue | None:
    topic = topic_raw.decode(errors="replace")
    if queue_id < 0 or not _valid_topic(topic):
        log.error("recovery: record at %d names no valid topic and queue; not indexed", at)
        return None
    return queues.get_or_create(topic, queue_id)


def _valid_topic(topic: str) -> bool:
    try:
        check_topic(topic)
    except InvalidParameterError:
        return False
    return True
