"""What the index stores for a record: 64-bit hashes of `topic#key` and `topic#UNIQ_KEY`.

Business keys (the space-separated KEYS property) and unique keys (UNIQ_KEY, the client's
message id) hash in separate spaces, so a key query never wades through unique ids that happen
to be spelled the same. Rolled-back transaction records are not indexed (as RocketMQ).

indexed_records runs in C (ferry.native) when it can; the C code answers None for what it
leaves to the Python code here (a malformed record, non-ASCII keys), which is also the
reference the tests compare it with. The C code's tuples and hash lists are not tracked by the
cyclic collector (they hold ints only; keep it so): the index applies thousands of records at
once under load, and the collector walking them cost more than the scan.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ferry import native
from ferry.protocol import record, record_layout

KEY_SPACE = b"K"
UNIQUE_SPACE = b"U"
TX_ROLLBACK = record_layout.SYSFLAG_TX_ROLLBACK  # both transaction bits
_KEYS = f"{record.PROPERTY_KEYS}{record.PROP_SEP}".encode()
_UNIQ_KEY = f"{record.PROPERTY_UNIQ_KEY}{record.PROP_SEP}".encode()
# one unpack per record
_HEAD = record_layout.fields_struct(
    "TOTALSIZE", "MAGIC", "PHYSICALOFFSET", "SYSFLAG", "STORETIMESTAMP", "BODYLEN"
)
_END = record.PROP_END_BYTES
_MAX_PREFIXES = 4096  # topics whose hash prefixes are kept (a few, normally)


def key_hash(topic: str, key: str, *, unique: bool = False) -> int:
    """The stable 64-bit hash of one index key (the same in every process and version)."""
    return _hash((UNIQUE_SPACE if unique else KEY_SPACE) + f"{topic}#{key}".encode())


def _hash(raw: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")


# (CommitLog offset, store time ms, key hashes) of one record
Indexed = tuple[int, int, list[int]]


def indexed_records(buf: Any) -> list[Indexed]:
    """The key hashes of each record in buf; see indexed_records_py."""
    if native.ENABLED:
        found = native.indexed_records(buf)
        if found is not None:
            return found
    return indexed_records_py(buf)


def indexed_records_py(buf: Any) -> list[Indexed]:
    """The key hashes of each record in buf (whole records as they lie in the CommitLog,
    blank segment tails skipped); records without keys are left out. The index's hot path,
    one pass of a few C calls per record: it reads only the fields it needs and finds KEYS and
    UNIQ_KEY without decoding the other properties. Raises RecordError at the first record
    whose sizes do not add up."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    end = len(data)
    unpack_head = _HEAD.unpack_from
    find = data.find
    blake2b = hashlib.blake2b
    from_bytes = int.from_bytes
    prefixes = _prefixes
    magic_ok, blank, fixed = record.MAGIC, record.BLANK_MAGIC, record.FIXED_SIZE
    tail, len_byte = record_layout.TAIL_SIZE, record_layout.TOPIC_LEN_SIZE
    props_len = record_layout.PROPS_LEN.size
    end_byte, keys_len, uniq_len = _END[0], len(_KEYS), len(_UNIQ_KEY)
    out: list[Indexed] = []
    pos = 0
    while pos < end:
        if end - pos < record.OFF_BODY:  # only a blank segment tail is this short
            if end - pos >= record.BLANK_MIN:
                size, magic = record.PREFIX.unpack_from(data, pos)
                if magic == blank and size > 0:
                    pos += size
                    continue
            raise record.RecordError(f"truncated record at {pos}")
        size, magic, phys, sysflag, store_ms, body_len = unpack_head(data, pos)
        if magic != magic_ok:
            if magic == blank and size > 0:
                pos += size
                continue
            raise record.RecordError(f"bad record at {pos}")
        stop = pos + size
        at = pos + record.OFF_BODY + body_len  # the topic length byte
        if size < fixed or stop > end or body_len < 0 or at + tail > stop:
            raise record.RecordError(f"bad record at {pos}")
        topic_end = at + len_byte + data[at]
        props = topic_end + props_len  # PROPLEN is the two bytes at topic_end
        if props > stop or props + ((data[topic_end] << 8) | data[topic_end + 1]) != stop:
            raise record.RecordError(f"record sizes disagree at {pos}")
        pos = stop
        if sysflag & TX_ROLLBACK == TX_ROLLBACK or props == stop:
            continue
        topic = data[at + len_byte : topic_end]
        spaces = prefixes.get(topic)
        if spaces is None:
            if len(prefixes) >= _MAX_PREFIXES:
                prefixes.clear()
            spaces = prefixes[topic] = (
                blake2b(KEY_SPACE + topic + b"#", digest_size=8),
                blake2b(UNIQUE_SPACE + topic + b"#", digest_size=8),
            )
        hashes: list[int] = []
        i = find(_KEYS, props, stop)
        while i > props and data[i - 1] != end_byte:  # a name starts them or follows \x02
            i = find(_KEYS, i + 1, stop)
        if i >= 0:
            value_end = find(_END, i + keys_len, stop)
            value = data[i + keys_len : stop if value_end < 0 else value_end]
            keys = value.decode(errors="replace").split()
            for k in dict.fromkeys(keys) if len(keys) > 1 else keys:
                h = spaces[0].copy()  # the prefix hashed once per topic, not per key
                h.update(k.encode())
                hashes.append(from_bytes(h.digest(), "little"))
        i = find(_UNIQ_KEY, props, stop)
        while i > props and data[i - 1] != end_byte:
            i = find(_UNIQ_KEY, i + 1, stop)
        if i >= 0:
            value_end = find(_END, i + uniq_len, stop)
            if value_end < 0:
                value_end = stop
            if value_end > i + uniq_len:
                h = spaces[1].copy()
                h.update(data[i + uniq_len : value_end])
                hashes.append(from_bytes(h.digest(), "little"))
        if hashes:
            out.append((phys, store_ms, hashes))
    return out


# topic -> BLAKE2b states that have hashed `K<topic>#` and `U<topic>#`
_prefixes: dict[bytes, tuple[Any, Any]] = {}
assert len(_KEYS) == 5
assert len(_UNIQ_KEY) == 9
