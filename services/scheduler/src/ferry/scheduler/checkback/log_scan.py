"""What the transaction queues' records say, and the search for committed copies in the log.

Half messages are read from RMQ_SYS_TRANS_HALF_TOPIC, op records from
RMQ_SYS_TRANS_OP_HALF_TOPIC (body: the half message's CommitLog offset; TRAN_END COMMIT or
ROLLBACK ends it, COMMITTING marks a commit under way) and check-max copies from
TRANS_CHECK_MAX_TIME_TOPIC (PREPAREDTXOFFSET: the half message's offset), each through its
ConsumeQueue: ordinary traffic is never read.

`find_copies` is the one place the CommitLog itself is read, only after a commit mark was
left without an end (remoting stopped between the copy and the op record): it looks at what was
stored within COPY_WINDOW_MS after the mark, skipping every record after reading its size,
sysflag, store time and PREPAREDTXOFFSET.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ferry.protocol import record, record_layout
from ferry.protocol.names import (
    TRAN_END_COMMITTING,
    TRAN_END_PROPERTY,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from ferry.scheduler.checkback.half_table import HalfMessage, Mark

# remoting stores a commit's copy right after its mark was stored, and gives up on a put after
# 10 s (STORE_TIMEOUT_S there): a copy stored later than this after its mark is not looked for
COPY_WINDOW_MS = 10_000

_SIZE_MAGIC = record_layout.PREFIX
_HEAD = record_layout.fields_struct(
    "TOTALSIZE", "MAGIC", "SYSFLAG", "STORETIMESTAMP", "PREPAREDTXOFFSET"
)


class Ended(NamedTuple):
    half_offset: int  # the CommitLog offset of the half message that ended


class Marked(NamedTuple):
    half_offset: int
    mark: Mark


def event_of(rec: record.Record) -> HalfMessage | Ended | Marked | None:
    """What one record of a transaction queue says (None: nothing, or not ours)."""
    if rec.topic == TRANS_OP_HALF_TOPIC:
        try:
            half_offset = int(rec.body)
        except ValueError:
            return None
        if rec.properties.get(TRAN_END_PROPERTY) == TRAN_END_COMMITTING:
            return Marked(half_offset, Mark(rec.phys_offset, rec.store_timestamp))
        return Ended(half_offset)
    if rec.topic == TRANS_CHECK_MAX_TIME_TOPIC:
        return Ended(rec.prepared_tx_offset) if rec.prepared_tx_offset > 0 else None
    if rec.topic == TRANS_HALF_TOPIC:
        props = rec.properties
        return HalfMessage(
            phys_offset=rec.phys_offset,
            size=rec.total_size,
            queue_offset=rec.queue_offset,
            store_ms=rec.store_timestamp,
            group=props.get(record.PROPERTY_PGROUP, ""),
            msg_id=props.get(record.PROPERTY_UNIQ_KEY, ""),
            traceparent=props.get("traceparent", ""),
        )
    return None


def find_copies(buf: Any, wanted: set[int], until_ms: int) -> tuple[set[int], bool]:
    """(half offsets in `wanted` whose committed copy lies in buf, whether a record stored
    after until_ms was reached: the search window ends there)."""
    found: set[int] = set()
    stop = len(buf)
    pos = 0
    commit = record.SYSFLAG_TX_COMMIT
    while pos + _SIZE_MAGIC.size <= stop:
        if stop - pos >= record.OFF_BODY:
            size, magic, sysflag, store_ms, prepared = _HEAD.unpack_from(buf, pos)
        else:
            size, magic = _SIZE_MAGIC.unpack_from(buf, pos)
            sysflag = store_ms = prepared = 0
        if size <= 0 or pos + size > stop:
            raise record.RecordError(f"bad record size {size} at {pos}")
        if magic == record.MAGIC:
            if store_ms > until_ms:
                return found, True
            if sysflag & commit and prepared in wanted:
                found.add(prepared)
        elif magic != record.BLANK_MAGIC:
            raise record.RecordError(f"bad magic {magic:#x} at {pos}")
        pos += size
    return found, False
