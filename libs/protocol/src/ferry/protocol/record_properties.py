"""A record's properties: the reserved keys, their text encoding (key SEP value END, as
RocketMQ's), and the ConsumeQueue tag code of the TAGS property (reached as
ferry.protocol.record.X)."""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping

from ferry.protocol.record_layout import PROP_END, PROP_SEP
from ferry.protocol.record_types import RecordError

# reserved property keys
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_PGROUP = "PGROUP"
# set by the scheduler on what it delivers: the CommitLog offset of the record it came from
PROPERTY_SCHEDULED_FROM = "SCHEDULED_FROM"
# properties the SDK and the brokers set themselves: a copy of a message (a resend, a row
# forwarded by Spark) drops them, or it would be taken for a delayed, retried or transactional one
SYSTEM_PROPERTIES = frozenset(
    {
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_UNIQ_KEY,
        PROPERTY_DELAY,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QID,
        PROPERTY_RETRY_TOPIC,
        PROPERTY_RECONSUME_TIME,
        PROPERTY_MAX_RECONSUME_TIMES,
        PROPERTY_TRAN_MSG,
        PROPERTY_PGROUP,
    }
)
TAGS_KEY = f"{PROPERTY_TAGS}{PROP_SEP}".encode()  # how a TAGS item starts in the properties
PROP_END_BYTES = PROP_END.encode()


def encode_properties(props: Mapping[str, str]) -> bytes:
    if not props:
        return b""
    return "".join([f"{k}{PROP_SEP}{v}{PROP_END}" for k, v in props.items()]).encode()


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    if not raw:
        return {}
    text = raw.decode() if type(raw) is bytes else str(raw, "utf-8")
    out: dict[str, str] = {}
    for item in text.split(PROP_END):
        if item:
            key, _, value = item.partition(PROP_SEP)
            out[key] = value
    return out


def check_property(key: str, value: str) -> None:
    for ch in (PROP_SEP, PROP_END):
        if ch in key or ch in value:
            raise RecordError(f"property {key!r} contains a reserved separator character")


def tags_code_of(props_raw: bytes) -> int:
    """The ConsumeQueue tag code of a record: the Java hash of its TAGS property, 0 if none."""
    i = props_raw.find(TAGS_KEY)
    while i > 0 and props_raw[i - 1] != PROP_END_BYTES[0]:  # starts a key, not inside a value
        i = props_raw.find(TAGS_KEY, i + 1)
    if i < 0:
        return 0
    start = i + len(TAGS_KEY)
    end = props_raw.find(PROP_END_BYTES, start)
    return tags_code(props_raw[start : end if end >= 0 else len(props_raw)])


@functools.lru_cache(maxsize=4096)
def tags_code(tag: bytes) -> int:
    return java_string_hash(tag.decode(errors="replace"))


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 units, int32), as RocketMQ stores tag codes."""
    units = text.encode("utf-16-be")
    h = 0
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h
