"""The CommitLog record codec: how one message lies in the log and on the wire.

Producers encode records in this layout, the store appends them as they are (filling in queue
offset, physical offset, store time and host, then the CRC), pulls return them untouched and
consumers decode them here. Big-endian, RocketMQ's v1 field order (see docs/protocol.md);
where each field lies is ferry.protocol.record_layout's, and walk() is the one loop over
consecutive records that the decoders here and the SDK's build on. This module checks and
decodes; encoding is record_encode's, properties (keys, text encoding, tag codes)
record_properties', hosts and offset message ids record_hosts', the Record tuple and
RecordError record_types'. Every name of theirs is re-exported here: callers use record.X.

Departure from RocketMQ: the CRC covers every byte after the CRC field, not the body alone, so
that recovery also catches torn headers, topics and properties.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

from ferry.protocol import record_layout
from ferry.protocol.record_encode import encode_plain, encode_record, retopic, topic_tail
from ferry.protocol.record_hosts import (
    decode_offset_msg_id,
    offset_msg_id,
    pack_host,
    unpack_host,
)
from ferry.protocol.record_layout import (
    HOST_SIZE,
    MAX_PROPS_BYTES,
    MAX_TOPIC_BYTES,
    OFF_CRC,
    OFF_QUEUE_OFFSET,
    OFF_STORE_TIMESTAMP,
    PROPS_LEN,
    TAIL_SIZE,
    TOPIC_LEN_SIZE,
    fields_at,
)
from ferry.protocol.record_properties import (
    PROP_END_BYTES,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_PGROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SCHEDULED_FROM,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRAN_MSG,
    PROPERTY_UNIQ_KEY,
    SYSTEM_PROPERTIES,
    TAGS_KEY,
    check_property,
    decode_properties,
    encode_properties,
    java_string_hash,
    tags_code,
    tags_code_of,
)
from ferry.protocol.record_types import Record, RecordError

# encoding, what the codec yields, a record's properties and its hosts (with the offset message
# ids made of them) live in sibling modules; their names are reached as record.X, and the
# per-record loops call them directly (no extra layer); every public name is listed
__all__ = [
    "BLANK_MAGIC",
    "BLANK_MIN",
    "BODY_LEN",
    "CRC",
    "CRC_START",
    "FIXED_SIZE",
    "HEAD",
    "HOST_SIZE",
    "MAGIC",
    "MAX_PROPS_BYTES",
    "MAX_TOPIC_BYTES",
    "OFFSETS",
    "OFF_BODY",
    "OFF_BODYLEN",
    "OFF_CRC",
    "OFF_OFFSETS",
    "OFF_QUEUE_ID",
    "OFF_QUEUE_OFFSET",
    "OFF_STORE_STAMP",
    "OFF_STORE_TIMESTAMP",
    "OFF_SYSFLAG",
    "PREFIX",
    "PROPERTY_DELAY",
    "PROPERTY_KEYS",
    "PROPERTY_MAX_RECONSUME_TIMES",
    "PROPERTY_PGROUP",
    "PROPERTY_REAL_QID",
    "PROPERTY_REAL_TOPIC",
    "PROPERTY_RECONSUME_TIME",
    "PROPERTY_RETRY_TOPIC",
    "PROPERTY_SCHEDULED_FROM",
    "PROPERTY_TAGS",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TRAN_MSG",
    "PROPERTY_UNIQ_KEY",
    "PROPS_LEN",
    "PROP_END",
    "PROP_END_BYTES",
    "PROP_SEP",
    "QUEUE_ID",
    "STORE_STAMP",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_TX_COMMIT",
    "SYSFLAG_TX_PREPARED",
    "SYSTEM_PROPERTIES",
    "TAGS_KEY",
    "TAIL_SIZE",
    "TOPIC_LEN_SIZE",
    "Record",
    "RecordError",
    "check_layout",
    "check_property",
    "decode_offset_msg_id",
    "decode_properties",
    "encode_plain",
    "encode_properties",
    "encode_record",
    "iter_records",
    "java_string_hash",
    "offset_msg_id",
    "pack_host",
    "properties_bytes",
    "record_crc",
    "retopic",
    "tags_code",
    "tags_code_of",
    "topic_bytes",
    "topic_of",
    "topic_tail",
    "unpack_host",
    "verify_crc",
    "walk",
]

# the layout's constants that users of the codec reach as record.X
BLANK_MAGIC = record_layout.BLANK_MAGIC
BLANK_MIN = record_layout.BLANK_MIN
CRC_START = record_layout.CRC_START
FIXED_SIZE = record_layout.FIXED_SIZE
HEAD = record_layout.HEAD
MAGIC = record_layout.MAGIC
OFF_BODY = record_layout.OFF_BODY
OFF_BODYLEN = record_layout.OFF_BODYLEN
OFF_QUEUE_ID = record_layout.OFF_QUEUE_ID
OFF_SYSFLAG = record_layout.OFF_SYSFLAG
PREFIX = record_layout.PREFIX
PROP_END = record_layout.PROP_END
PROP_SEP = record_layout.PROP_SEP
SYSFLAG_COMPRESSED = record_layout.SYSFLAG_COMPRESSED
SYSFLAG_TX_COMMIT = record_layout.SYSFLAG_TX_COMMIT
SYSFLAG_TX_PREPARED = record_layout.SYSFLAG_TX_PREPARED

# Fields the store fills in: QUEUEID, QUEUEOFFSET/PHYSICALOFFSET, STORETIMESTAMP/STOREHOST.
QUEUE_ID = fields_at("QUEUEID")
OFFSETS = fields_at("QUEUEOFFSET", "PHYSICALOFFSET")
STORE_STAMP = fields_at("STORETIMESTAMP", "STOREHOST")
CRC = fields_at("CRC")
BODY_LEN = fields_at("BODYLEN")
OFF_OFFSETS = OFF_QUEUE_OFFSET
OFF_STORE_STAMP = OFF_STORE_TIMESTAMP

# Decoded topics (and hosts, in record_hosts): a consumer sees the same few over and over, and
# formatting them per record was a fifth of its decode time. Bounded, since records may come
# from anywhere.
_TOPICS: dict[bytes, str] = {}
_CACHE_MAX = 4096


def topic_of(raw: bytes) -> str:
    """A record's topic bytes as text (cached)."""
    return _topic_of(raw)


def _topic_of(raw: bytes) -> str:
    topic = _TOPICS.get(raw)
    if topic is None:
        topic = raw.decode()
        if len(_TOPICS) >= _CACHE_MAX:
            _TOPICS.clear()
        _TOPICS[raw] = topic
    return topic


def record_crc(buf: Any, pos: int, size: int) -> int:
    return zlib.crc32(memoryview(buf)[pos + CRC_START : pos + size])


def check_layout(buf: Any, pos: int, end: int) -> int:
    """Validates the framing of the record at pos (sizes agree, magic right); returns its size."""
    if end - pos < FIXED_SIZE:
        raise RecordError(f"truncated record at {pos}: {end - pos} bytes left")
    size, magic = PREFIX.unpack_from(buf, pos)
    if magic != MAGIC:
        raise RecordError(f"bad magic {magic:#x} at {pos}")
    if size < FIXED_SIZE or pos + size > end:
        raise RecordError(f"bad record size {size} at {pos}")
    (body_len,) = BODY_LEN.unpack_from(buf, pos + OFF_BODYLEN)
    if body_len < 0 or OFF_BODY + body_len + TAIL_SIZE > size:
        raise RecordError(f"bad body length {body_len} at {pos}")
    topic_len = buf[pos + OFF_BODY + body_len]
    props_at = pos + OFF_BODY + body_len + 1 + topic_len
    if props_at + PROPS_LEN.size > pos + size:
        raise RecordError(f"bad topic length at {pos}")
    (props_len,) = PROPS_LEN.unpack_from(buf, props_at)
    if props_at + PROPS_LEN.size + props_len != pos + size:
        raise RecordError(f"record sizes disagree at {pos}")
    return int(size)


def topic_bytes(buf: Any, pos: int) -> bytes:
    (body_len,) = BODY_LEN.unpack_from(buf, pos + OFF_BODYLEN)
    at = pos + OFF_BODY + body_len + TOPIC_LEN_SIZE
    return bytes(buf[at : at + buf[at - 1]])


def properties_bytes(buf: Any, pos: int, size: int) -> bytes:
    (body_len,) = BODY_LEN.unpack_from(buf, pos + OFF_BODYLEN)
    at = pos + OFF_BODY + body_len
    return bytes(buf[at + TAIL_SIZE + buf[at] : pos + size])


def walk(buf: Any, pos: int = 0, stop: int | None = None) -> Iterator[tuple[int, Any, int]]:
    """The records of buf[pos:stop] in turn, blank records (segment tails) stepped over: per
    record (pos, head, at), head the HEAD fields in one unpack (TOTALSIZE first, BODYLEN
    last), at the position of its TOPICLEN byte. Raises RecordError at a record whose magic
    or size is wrong; what lies past the head is the caller's to check."""
    stop = len(buf) if stop is None else stop
    unpack = HEAD.unpack_from
    while pos < stop:
        if stop - pos < OFF_BODY:  # only a blank segment tail is this short
            size, magic = PREFIX.unpack_from(buf, pos)
            if magic == BLANK_MAGIC and size > 0:
                pos += size
                continue
            raise RecordError(f"bad record at {pos}")
        head = unpack(buf, pos)
        size = head[0]
        if head[1] != MAGIC:
            if head[1] == BLANK_MAGIC and size > 0:
                pos += size
                continue
            raise RecordError(f"bad record at {pos}")
        if size < FIXED_SIZE or pos + size > stop:
            raise RecordError(f"bad record at {pos}")
        yield pos, head, pos + OFF_BODY + head[-1]
        pos += size


def iter_records(buf: Any, start: int = 0, end: int | None = None) -> Iterator[Record]:
    """Decodes consecutive records; steps over blank (segment tail) records."""
    mv = memoryview(buf)
    for pos, head, at in walk(buf, start, end):
        (
            size,
            _,
            _,
            queue_id,
            flag,
            queue_offset,
            phys_offset,
            sysflag,
            born_ts,
            born_host,
            store_ts,
            store_host,
            reconsume,
            prepared,
            _,
        ) = head
        topic_len = buf[at]
        yield Record(
            size,
            queue_id,
            flag,
            queue_offset,
            phys_offset,
            sysflag,
            born_ts,
            unpack_host(born_host),
            store_ts,
            unpack_host(store_host),
            reconsume,
            prepared,
            bytes(mv[pos + OFF_BODY : at]),
            _topic_of(bytes(mv[at + TOPIC_LEN_SIZE : at + TOPIC_LEN_SIZE + topic_len])),
            decode_properties(mv[at + TAIL_SIZE + topic_len : pos + size]),
        )


def verify_crc(buf: Any, pos: int, size: int) -> bool:
    (stored,) = CRC.unpack_from(buf, pos + OFF_CRC)
    return bool(stored == record_crc(buf, pos, size))
