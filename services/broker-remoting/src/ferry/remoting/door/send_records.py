"""A RocketMQ send command's message(s) as the records frame of a SendMessageRequest.

Ferry's record is RocketMQ's CommitLog layout, so a send becomes records without decoding
anything: the head is packed from the header's numbers, the body and the properties string go
in as sent (a compressed body stays compressed, its sysflag bit kept). A batch body is a run of
items `total|magic|crc|flag|bodyLen|body|propLen(2)|props`; each item's `propLen|props` is
byte for byte the record's PROPLEN and PROPERTIES, so an item costs one head pack and three
slices. The store checks every record exactly, as it does for the SDK's sends.

The batch's loop runs in C when ferry.native is enabled; the C code answers None for a batch
it does not take (a malformed item, a number out of range), and batch_records_py, the
reference the tests compare with, then raises the error that names it.
"""

from __future__ import annotations

import struct
import zlib

from ferry import native
from ferry.protocol import record
from ferry.protocol.errors import InvalidParameterError, MessageIllegalError
from ferry.protocol.record_layout import FIXED_SIZE, HEAD, HOST_SIZE, MAGIC

# RocketMQ clients read PROPLEN as a signed 16-bit number: longer properties break them
MAX_CLIENT_PROPS = 0x7FFF
# sysflag bits saying a host is IPv6: the records written here always hold IPv4 hosts
SYSFLAG_HOST_V6 = 0x10 | 0x20
_EMPTY_HOST = bytes(HOST_SIZE)
_ITEM = struct.Struct(">iIIii")  # a batch item: total, magic, crc, flag, bodyLen
_ITEM_MIN = _ITEM.size + 2  # and propLen
_PROPS_LEN = struct.Struct(">h")

_HOSTS: dict[str, bytes] = {}
_HOSTS_MAX = 4096


def born_host(peer: str) -> bytes:
    """A connection's 'ip:port' in the record's host layout (zeros when not IPv4; cached,
    since one connection sends many messages)."""
    raw = _HOSTS.get(peer)
    if raw is None:
        raw = record.pack_host(peer)
        if len(_HOSTS) >= _HOSTS_MAX:
            _HOSTS.clear()
        _HOSTS[peer] = raw
    return raw


def stored_sysflag(sysflag: int) -> int:
    return sysflag & ~SYSFLAG_HOST_V6


def single_record(
    topic: str,
    body: bytes,
    props: bytes,
    *,
    queue_id: int,
    flag: int,
    sysflag: int,
    born_timestamp: int,
    host: bytes,
    reconsume_times: int,
) -> bytes:
    """One message as one record (the topic's tail cached by record.topic_tail)."""
    n_props = len(props)
    if n_props > MAX_CLIENT_PROPS:
        raise MessageIllegalError(
            f"properties of {n_props} bytes: at most {MAX_CLIENT_PROPS} (RocketMQ clients "
            "read their length as a signed 16-bit number)"
        )
    tail = record.topic_tail(topic)
    n_body = len(body)
    try:
        head = HEAD.pack(
            FIXED_SIZE - 1 + n_body + len(tail) + n_props,
            MAGIC,
            0,
            max(queue_id, 0),
            flag,
            0,
            0,
            stored_sysflag(sysflag),
            born_timestamp,
            host,
            0,
            _EMPTY_HOST,
            reconsume_times,
            0,
            n_body,
        )
    except struct.error as exc:
        raise InvalidParameterError(f"a header number is out of range: {exc}") from None
    return b"".join((head, body, tail, n_props.to_bytes(2, "big"), props))


def batch_body(body: bytes, sysflag: int, limit: int) -> tuple[bytes, int]:
    """(the batch body as its items lie, the sysflag to store them with). The C++ client
    zlib-compresses a whole batch body of 4 KB and more (Java's never does): its items are
    stored uncompressed, each as sent. `limit` bounds what a body may inflate to."""
    if not sysflag & record.SYSFLAG_COMPRESSED:
        return body, sysflag
    inflate = zlib.decompressobj()
    try:
        plain = inflate.decompress(body, limit + 1)
    except zlib.error as exc:
        raise MessageIllegalError(f"the compressed batch body does not inflate: {exc}") from None
    if len(plain) > limit or inflate.unconsumed_tail:
        raise MessageIllegalError(f"the batch body inflates past {limit} bytes")
    return plain, sysflag & ~record.SYSFLAG_COMPRESSED


def batch_records(
    topic: str,
    body: bytes,
    *,
    queue_id: int,
    sysflag: int,
    born_timestamp: int,
    host: bytes,
    reconsume_times: int,
) -> tuple[bytes, int]:
    """(records frame, count) of a batch body; MessageIllegalError where an item's sizes do
    not add up, InvalidParameterError where a header number does not fit its field."""
    if native.ENABLED:
        found = native.batch_records(
            body,
            record.topic_tail(topic),
            max(queue_id, 0),
            stored_sysflag(sysflag),
            born_timestamp,
            host,
            reconsume_times,
        )
        if found is not None:
            return found
    return batch_records_py(
        topic,
        body,
        queue_id=queue_id,
        sysflag=sysflag,
        born_timestamp=born_timestamp,
        host=host,
        reconsume_times=reconsume_times,
    )


def batch_records_py(
    topic: str,
    body: bytes,
    *,
    queue_id: int,
    sysflag: int,
    born_timestamp: int,
    host: bytes,
    reconsume_times: int,
) -> tuple[bytes, int]:
    """batch_records in Python: the reference, and what explains a batch the C code declines."""
    tail = record.topic_tail(topic)
    extra = FIXED_SIZE - 1 + len(tail) - _ITEM_MIN  # record size minus item size
    sysflag = stored_sysflag(sysflag)
    queue_id = max(queue_id, 0)
    try:  # the header's numbers once, so that a failing pack below means the item's
        HEAD.pack(
            0,
            MAGIC,
            0,
            queue_id,
            0,
            0,
            0,
            sysflag,
            born_timestamp,
            host,
            0,
            _EMPTY_HOST,
            reconsume_times,
            0,
            0,
        )
    except struct.error as exc:
        raise InvalidParameterError(f"a header number is out of range: {exc}") from None
    pack = HEAD.pack
    unpack = _ITEM.unpack_from
    parts: list[bytes] = []
    add = parts.append
    pos = 0
    end = len(body)
    try:
        while pos < end:
            total, _magic, _crc, flag, n_body = unpack(body, pos)
            at = pos + _ITEM.size + n_body  # the item's propLen
            nxt = pos + total
            if n_body < 0 or total < _ITEM_MIN or nxt > end or at + 2 > nxt:
                raise MessageIllegalError(f"batch item at byte {pos}: sizes do not add up")
            (n_props,) = _PROPS_LEN.unpack_from(body, at)
            if n_props < 0 or at + 2 + n_props != nxt:
                raise MessageIllegalError(f"batch item at byte {pos}: sizes do not add up")
            add(
                pack(
                    total + extra,
                    MAGIC,
                    0,
                    queue_id,
                    flag,
                    0,
                    0,
                    sysflag,
                    born_timestamp,
                    host,
                    0,
                    _EMPTY_HOST,
                    reconsume_times,
                    0,
                    n_body,
                )
            )
            add(body[pos + _ITEM.size : at])
            add(tail)
            add(body[at:nxt])
            pos = nxt
    except struct.error as exc:
        raise MessageIllegalError(f"batch body ends inside an item ({exc})") from None
    if not parts:
        raise MessageIllegalError("a batch without messages")
    return b"".join(parts), len(parts) // 4


def prop_value(props: str, key: str) -> str | None:
    """One property of a properties string as sent (key\\x01value\\x02...), without splitting
    the rest."""
    probe = key + record.PROP_SEP
    if props.startswith(probe):
        start = len(probe)
    else:
        at = props.find(record.PROP_END + probe)
        if at < 0:
            return None
        start = at + 1 + len(probe)
    stop = props.find(record.PROP_END, start)
    return props[start:] if stop < 0 else props[start:stop]
