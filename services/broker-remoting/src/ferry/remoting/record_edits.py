"""Record rewrites remoting makes before a put: one record taken out of a send's frame and
re-addressed (a half message, a stamped request, a committed copy). The layout itself is
ferry.protocol.record's; this module only checks what a rewrite needs and turns codec errors
into typed ones."""

from __future__ import annotations

from typing import Any

from ferry.protocol import record
from ferry.protocol.errors import MessageIllegalError

# Room for a record's header, topic and properties on top of its body.
RECORD_OVERHEAD = 64 * 1024


def single_record(raw: Any, topic: str, what: str) -> record.Record:
    """The one record of a send's frame (a half message, a request), decoded; refused when
    the frame holds anything else or the record is for another topic."""
    buf = bytes(raw)
    try:
        if record.check_layout(buf, 0, len(buf)) != len(buf):
            raise record.RecordError("the frame holds more than one record")
        rec = next(record.iter_records(buf))
    except (record.RecordError, StopIteration, ValueError) as exc:
        raise MessageIllegalError(f"{what} does not decode: {exc}") from None
    if rec.topic != topic:
        raise MessageIllegalError(f"record is for topic {rec.topic!r}, not {topic!r}")
    return rec


def retopic(rec: record.Record, topic: str, **changes: Any) -> bytes:
    try:
        return record.retopic(rec, topic, **changes)
    except record.RecordError as exc:  # properties grown past 64 KiB
        raise MessageIllegalError(str(exc)) from None
