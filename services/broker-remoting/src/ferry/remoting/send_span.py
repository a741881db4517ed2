"""The message ids a send carries, for its span: what makes every message findable by its
msg_id (UNIQ_KEY) in a trace backend, batches included, with no client tracing set up.

OpenTelemetry's messaging conventions put one message's id in `messaging.message.id`; a batch
has no per-message attribute, so its ids go in one span event `messages`, as one string
`ferry.batch.message_ids` (the ids joined by ","): a string array would cost the SDK's per-value
checks, 25 µs a batch of 128). A producer that sends the ids it has at hand (the request's
msg_ids) costs nothing more; otherwise they are found with one regex pass over the records (in
C, only for a traced send, after the sender has its answer: about 55 µs a batch of 128 x 1 KiB);
when it finds more or fewer ids than records (a body or another property that looks like the
key), the records are walked exactly.
"""

from __future__ import annotations

import re
from typing import Any

from opentelemetry.trace import Span

from ferry.protocol import record_layout
from ferry.protocol.record import OFF_BODY, OFF_BODYLEN, PROPERTY_UNIQ_KEY, decode_properties
from ferry.runtime import telemetry

MESSAGE_ID = "messaging.message.id"
BATCH_EVENT = "messages"
BATCH_IDS = "ferry.batch.message_ids"
MAX_ID_BYTES = 128
_UNIQ = re.compile(
    re.escape(PROPERTY_UNIQ_KEY.encode()) + rb"\x01([^\x01\x02]{1,%d})\x02" % MAX_ID_BYTES
)
_SIZE = record_layout.fields_at("TOTALSIZE")
_BODY_LEN = record_layout.fields_at("BODYLEN")
_PROPS_LEN = record_layout.PROPS_LEN


def record_ids(frame: Any, count: int) -> str:
    """The UNIQ_KEY of each of the `count` records in frame, in order, joined by "," ("" for
    a record that has none)."""
    view = memoryview(frame)
    found = _UNIQ.findall(view)
    if len(found) == count:
        return b",".join(found).decode(errors="replace")
    return ",".join(_walk(view, count))


def _walk(view: memoryview, count: int) -> list[str]:
    """The exact way: each record's properties, by the sizes in its header."""
    out: list[str] = []
    pos, end = 0, len(view)
    while len(out) < count and pos + OFF_BODY <= end:
        (size,) = _SIZE.unpack_from(view, pos)
        if size < OFF_BODY or pos + size > end:
            break
        (body_len,) = _BODY_LEN.unpack_from(view, pos + OFF_BODYLEN)
        at = pos + OFF_BODY + max(body_len, 0)
        if at >= pos + size:
            break
        at += record_layout.TOPIC_LEN_SIZE + view[at]  # topic length, topic
        if at + _PROPS_LEN.size > pos + size:
            break
        (props_len,) = _PROPS_LEN.unpack_from(view, at)
        at += _PROPS_LEN.size
        try:
            props = decode_properties(bytes(view[at : at + props_len]))
        except UnicodeDecodeError:
            props = {}
        out.append(props.get(PROPERTY_UNIQ_KEY, "")[:MAX_ID_BYTES])
        pos += size
    return out


def add_message_ids(span: Span, frame: Any, count: int, given: str = "") -> None:
    """messaging.message.id on a one-message send; one `messages` event listing the ids of a
    batch: `given` (the request's msg_ids), else found in the records. Never raises: a span is
    not worth a failed send."""
    try:
        ids = given[: count * (MAX_ID_BYTES + 1)] or record_ids(frame, count)
        if count == 1:
            if ids:
                span.set_attribute(MESSAGE_ID, ids)
        elif ids.strip(","):
            span.add_event(BATCH_EVENT, {BATCH_IDS: ids})
    except Exception:  # noqa: BLE001 - failed() logs it, once
        telemetry.failed("send span message ids")
