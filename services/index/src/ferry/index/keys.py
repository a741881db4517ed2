"""What the index stores for a record: 64-bit hashes of `topic#key` and `topic#UNIQ_KEY`.

Business keys (the space-separated KEYS property) and unique keys (UNIQ_KEY, the client's
message id) hash in separate spaces, so a key query never wades through unique ids that happen
to be spelled the same. Rolled-back transaction records are not indexed (as RocketMQ).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

from ferry.protocol import record

KEY_SPACE = b"K"
UNIQUE_SPACE = b"U"
TX_ROLLBACK = record.SYSFLAG_TX_PREPARED | record.SYSFLAG_TX_COMMIT  # both bits: rollback
_KEYS = f"{record.PROPERTY_KEYS}{record.PROP_SEP}".encode()
_UNIQ_KEY = f"{record.PROPERTY_UNIQ_KEY}{record.PROP_SEP}".encode()
# PHYSICALOFFSET @28, SYSFLAG @36, STORETIMESTAMP @56 and BODYLENGTH @84 of a record
_FIELDS = struct.Struct(">28xqi16xq20xi")
assert _FIELDS.size == record.OFF_BODY


def key_hash(topic: str, key: str, *, unique: bool = False) -> int:
    """The stable 64-bit hash of one index key (the same in every process and version)."""
    return _hash((UNIQUE_SPACE if unique else KEY_SPACE) + f"{topic}#{key}".encode())


def _hash(raw: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")


class Indexed(NamedTuple):
    """What the index needs of one stored record."""

    phys_offset: int
    store_ms: int
    hashes: list[int]


def indexed_records(buf: Any) -> Iterator[Indexed]:
    """The key hashes of each record in buf (whole records as they lie in the CommitLog,
    blank segment tails skipped). The index's hot path: it reads only the fields it needs and
    finds KEYS and UNIQ_KEY without decoding the other properties. Raises RecordError at the
    first record whose sizes do not add up."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    end = len(data)
    unpack_prefix, unpack_fields = record.PREFIX.unpack_from, _FIELDS.unpack_from
    pos = 0
    while pos < end:
        if end - pos < record.BLANK_MIN:
            raise record.RecordError(f"truncated record at {pos}")
        size, magic = unpack_prefix(data, pos)
        if magic == record.BLANK_MAGIC and size > 0:
            pos += size
            continue
        stop = pos + size
        if magic != record.MAGIC or size < record.FIXED_SIZE or stop > end:
            raise record.RecordError(f"bad record at {pos}")
        phys, sysflag, store_ms, body_len = unpack_fields(data, pos)
        at = pos + record.OFF_BODY + body_len
        if body_len < 0 or at + 3 > stop:
            raise record.RecordError(f"bad body length at {pos}")
        topic_end = at + 1 + data[at]
        props_at = topic_end + 2
        if props_at > stop or props_at + int.from_bytes(data[topic_end:props_at]) != stop:
            raise record.RecordError(f"record sizes disagree at {pos}")
        if sysflag & TX_ROLLBACK == TX_ROLLBACK:
            yield Indexed(phys, store_ms, [])
        else:
            yield Indexed(phys, store_ms, _hashes(data, data[at + 1 : topic_end], props_at, stop))
        pos = stop


def _hashes(data: bytes, topic: bytes, start: int, stop: int) -> list[int]:
    """Hashes of the KEYS (each once) and UNIQ_KEY of properties data[start:stop]."""
    out: list[int] = []
    found = _property(data, _KEYS, start, stop)
    if found is not None:
        keys = data[found[0] : found[1]].decode(errors="replace").split()
        prefix = KEY_SPACE + topic + b"#"
        out.extend(_hash(prefix + k.encode()) for k in dict.fromkeys(keys))
    found = _property(data, _UNIQ_KEY, start, stop)
    if found is not None and found[1] > found[0]:
        out.append(_hash(UNIQUE_SPACE + topic + b"#" + data[found[0] : found[1]]))
    return out


def _property(data: bytes, name: bytes, start: int, stop: int) -> tuple[int, int] | None:
    """Where the value of property `name` (given as b"NAME\x01") lies in data[start:stop]."""
    i = data.find(name, start, stop)
    while i > start and data[i - 1] != 2:  # must start a property, not sit inside a value
        i = data.find(name, i + 1, stop)
    if i < 0:
        return None
    value = i + len(name)
    value_end = data.find(b"\x02", value, stop)
    return value, stop if value_end < 0 else value_end
