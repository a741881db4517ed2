"""Where each field of a CommitLog record lies: the one description of the layout.

Every walk of record bytes takes its offsets, sizes, magic codes and flags from here: the
codec (ferry.protocol.record), the store's scans, the index and scheduler readers, and the C
units of ferry.native, whose record_layout.h is generated from this module
(libs/native/gen_layout.py; a test fails when the two differ).

A record is big-endian, in RocketMQ's v1 field order: a fixed head of HEAD_FIELDS (up to and
including BODYLEN), then BODY, TOPICLEN u8, TOPIC, PROPLEN u16, PROPERTIES. A segment's unused
tail is a blank record: [remaining i32][BLANK_MAGIC u32].

Hot loops unpack the few fields they need in one call: fields_struct() builds that struct
once, at import, with pad bytes between the fields named.
"""

from __future__ import annotations

import struct
from typing import NamedTuple


class Field(NamedTuple):
    name: str
    offset: int
    code: str  # struct format code of the field (big-endian)
    size: int


# (name, struct code) in the order they lie
_HEAD_SPEC = (
    ("TOTALSIZE", "i"),
    ("MAGIC", "I"),
    ("CRC", "I"),
    ("QUEUEID", "i"),
    ("FLAG", "i"),
    ("QUEUEOFFSET", "q"),
    ("PHYSICALOFFSET", "q"),
    ("SYSFLAG", "i"),
    ("BORNTIMESTAMP", "q"),
    ("BORNHOST", "8s"),
    ("STORETIMESTAMP", "q"),
    ("STOREHOST", "8s"),
    ("RECONSUMETIMES", "i"),
    ("PREPAREDTXOFFSET", "q"),
    ("BODYLEN", "i"),
)


def _fields() -> dict[str, Field]:
    out: dict[str, Field] = {}
    at = 0
    for name, code in _HEAD_SPEC:
        size = struct.calcsize(">" + code)
        out[name] = Field(name, at, code, size)
        at += size
    return out


HEAD_FIELDS = _fields()
HEAD = struct.Struct(">" + "".join(code for _, code in _HEAD_SPEC))  # the whole fixed head

OFF_TOTAL_SIZE = HEAD_FIELDS["TOTALSIZE"].offset
OFF_MAGIC = HEAD_FIELDS["MAGIC"].offset
OFF_CRC = HEAD_FIELDS["CRC"].offset
OFF_QUEUE_ID = HEAD_FIELDS["QUEUEID"].offset
OFF_FLAG = HEAD_FIELDS["FLAG"].offset
OFF_QUEUE_OFFSET = HEAD_FIELDS["QUEUEOFFSET"].offset
OFF_PHYS_OFFSET = HEAD_FIELDS["PHYSICALOFFSET"].offset
OFF_SYSFLAG = HEAD_FIELDS["SYSFLAG"].offset
OFF_BORN_TIMESTAMP = HEAD_FIELDS["BORNTIMESTAMP"].offset
OFF_BORN_HOST = HEAD_FIELDS["BORNHOST"].offset
OFF_STORE_TIMESTAMP = HEAD_FIELDS["STORETIMESTAMP"].offset
OFF_STORE_HOST = HEAD_FIELDS["STOREHOST"].offset
OFF_RECONSUME_TIMES = HEAD_FIELDS["RECONSUMETIMES"].offset
OFF_PREPARED_TX_OFFSET = HEAD_FIELDS["PREPAREDTXOFFSET"].offset
OFF_BODYLEN = HEAD_FIELDS["BODYLEN"].offset
OFF_BODY = HEAD.size
HOST_SIZE = HEAD_FIELDS["BORNHOST"].size

TOPIC_LEN_SIZE = 1  # TOPICLEN u8 after the body
PROPS_LEN = struct.Struct(">H")  # PROPLEN after the topic
TAIL_SIZE = TOPIC_LEN_SIZE + PROPS_LEN.size  # TOPICLEN and PROPLEN, after the body
FIXED_SIZE = OFF_BODY + TAIL_SIZE  # a record besides its body, topic and properties
MAX_TOPIC_BYTES = 0xFF
MAX_PROPS_BYTES = 0xFFFF
CRC_START = OFF_CRC + HEAD_FIELDS["CRC"].size  # the CRC covers every byte after its field

MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
PREFIX = struct.Struct(">iI")  # TOTALSIZE, MAGIC: also the whole of a blank record
BLANK_MIN = PREFIX.size  # a segment tail needs room for a blank record

# sysflag bits (RocketMQ's MessageSysFlag); the transaction type is the two bits of TX_MASK
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_TX_PREPARED = 0x4
SYSFLAG_TX_COMMIT = 0x8
SYSFLAG_TX_ROLLBACK = SYSFLAG_TX_PREPARED | SYSFLAG_TX_COMMIT
SYSFLAG_TX_MASK = SYSFLAG_TX_ROLLBACK

# properties: key\x01value\x02 per item
PROP_SEP = "\x01"
PROP_END = "\x02"

# a ConsumeQueue entry: the record's CommitLog offset, its size, its tags code
_CQ_SPEC = (("phys_offset", "q"), ("size", "i"), ("tags_code", "q"))
CQ_ENTRY = struct.Struct(">" + "".join(code for _, code in _CQ_SPEC))
CQ_ENTRY_SIZE = CQ_ENTRY.size
CQ_ENTRY_FIELDS = {
    name: struct.calcsize(">" + "".join(code for _, code in _CQ_SPEC[:i]))
    for i, (name, _) in enumerate(_CQ_SPEC)
}  # name -> offset in the entry


def fields_struct(*names: str) -> struct.Struct:
    """A struct that unpacks the named head fields (in layout order) in one call, from a
    record's first byte, skipping the bytes between them."""
    return struct.Struct(_format(names, 0))


def fields_at(first: str, *rest: str) -> struct.Struct:
    """The same from field `first` on: for pack_into/unpack_from at its offset."""
    return struct.Struct(_format((first, *rest), HEAD_FIELDS[first].offset))


def _format(names: tuple[str, ...], at: int) -> str:
    fmt = [">"]
    for name in names:
        field = HEAD_FIELDS[name]
        if field.offset < at:
            raise ValueError(f"{name} is out of layout order")
        if field.offset > at:
            fmt.append(f"{field.offset - at}x")
        fmt.append(field.code)
        at = field.offset + field.size
    return "".join(fmt)
