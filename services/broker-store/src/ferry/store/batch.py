"""Validation of a put's payload, before anything is written.

A put carries `count` records encoded with ferry.protocol.record.encode_record, concatenated in
one frame. Every record must pass record.check_layout (the checks are inlined here because this
loop runs once per message on the hot path; on a failure check_layout itself explains it), carry
the request's topic, have a body within maxMessageSize and fit in a CommitLog segment; the
records must fill the frame exactly. The scan also collects what the append needs per record.

The C scan (ferry.native) does the same checks and answers None when a record fails one; the
Python scan below then runs to name the failure, and is the reference the tests compare with.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ferry import native
from ferry.protocol import record, record_layout
from ferry.protocol.errors import MessageIllegalError

# one unpack per record
_HEAD = record_layout.fields_struct("TOTALSIZE", "MAGIC", "FLAG", "BODYLEN")
_TAGS_KEY = record.TAGS_KEY
_TAGS_END = record.PROP_END_BYTES
_TOPIC_LEN = record_layout.TOPIC_LEN_SIZE
_TAIL = record_layout.TAIL_SIZE
_MAGIC = record.MAGIC
_FIXED = record.FIXED_SIZE
_OFF_BODY = record.OFF_BODY


class Batch(NamedTuple):
    sizes: list[int]
    flags: list[int]
    tags: list[int]  # ConsumeQueue tags code of each record


def scan_batch(buf: bytes, count: int, topic_raw: bytes, max_body: int, max_record: int) -> Batch:
    """Checks the records of a put; raises MessageIllegalError naming the first bad one."""
    if native.ENABLED:
        found = native.scan_batch(buf, count, topic_raw, max_body, max_record, record.tags_code)
        if found is not None:
            return Batch(*found)
    return scan_batch_py(buf, count, topic_raw, max_body, max_record)


def scan_batch_py(
    buf: bytes, count: int, topic_raw: bytes, max_body: int, max_record: int
) -> Batch:
    """scan_batch in Python: the reference, and what explains a bad record."""
    n = len(buf)
    if count * _FIXED > n:
        raise MessageIllegalError(
            f"payload of {n} bytes cannot hold {count} records (at least {_FIXED} bytes each)"
        )
    sizes: list[int] = []
    flags: list[int] = []
    tags: list[int] = []
    topic_len = len(topic_raw)
    unpack_head = _HEAD.unpack_from
    find = buf.find
    startswith = buf.startswith
    tags_code = record.tags_code
    tail, len_byte, key_len, end_byte = _TAIL, _TOPIC_LEN, len(_TAGS_KEY), _TAGS_END[0]
    pos = 0
    for index in range(count):
        if n - pos < _FIXED:
            _layout_error(buf, pos, n, index)
        size, magic, flag, body_len = unpack_head(buf, pos)
        end = pos + size
        if magic != _MAGIC or size < _FIXED or end > n or body_len < 0:
            _layout_error(buf, pos, n, index)
        at = pos + _OFF_BODY + body_len  # the topic length byte
        if at + tail > end:
            _layout_error(buf, pos, n, index)
        props = at + tail + buf[at]  # PROPLEN is the two bytes before
        if props > end or props + ((buf[props - 2] << 8) | buf[props - 1]) != end:
            _layout_error(buf, pos, n, index)
        if buf[at] != topic_len or not startswith(topic_raw, at + len_byte):
            named = bytes(buf[at + len_byte : at + len_byte + buf[at]]).decode(errors="replace")
            raise MessageIllegalError(
                f"record {index} is for topic {named!r}, not {topic_raw.decode()!r}"
            )
        if body_len > max_body:
            raise MessageIllegalError(
                f"record {index}: body of {body_len} bytes exceeds maxMessageSize {max_body}"
            )
        if size > max_record:
            raise MessageIllegalError(
                f"record {index} of {size} bytes does not fit in a CommitLog segment"
            )
        code = 0
        if props < end:
            i = find(_TAGS_KEY, props, end)
            while i > props and buf[i - 1] != end_byte:  # a key starts them or follows \x02
                i = find(_TAGS_KEY, i + 1, end)
            if i >= 0:
                value_end = find(_TAGS_END, i + key_len, end)
                code = tags_code(buf[i + key_len : value_end if value_end >= 0 else end])
        sizes.append(size)
        flags.append(flag)
        tags.append(code)
        pos = end
    if pos != n:
        raise MessageIllegalError(
            f"{count} records fill {pos} bytes of a {n}-byte payload: count does not match"
        )
    return Batch(sizes, flags, tags)


def _layout_error(buf: Any, pos: int, end: int, index: int) -> None:
    try:
        record.check_layout(buf, pos, end)
    except record.RecordError as exc:
        raise MessageIllegalError(f"record {index}: {exc}") from None
    raise MessageIllegalError(f"record {index} at byte {pos} is malformed")
