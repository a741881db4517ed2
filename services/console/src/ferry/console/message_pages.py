"""Message query (by topic and time, by id, by key), one message with its body preview,
resend, and the dead-letter queues."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ferry.client import Message, MessageExt
from ferry.console.cluster_pages import console
from ferry.console.web import BadRequest, fmt_input, form, param, parse_time, same_origin
from ferry.protocol import record
from ferry.protocol.errors import FerryError
from ferry.protocol.names import DLQ_PREFIX, RETRY_PREFIX, check_topic

LIST_PREVIEW_CHARS = 96
DEFAULT_WINDOW_MS = 3600_000
MODES = ("time", "id", "key")
RESEND_OF = "CONSOLE_RESEND_OF"  # property naming the message a resend copies
# properties the broker or the SDK set; a resend gets fresh ones
SYSTEM_PROPERTIES = record.SYSTEM_PROPERTIES | frozenset(
    {
        "ORIGIN_MESSAGE_ID",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "traceparent",
        "tracestate",
        "baggage",
        RESEND_OF,
    }
)


@dataclass(frozen=True)
class Preview:
    text: str
    is_text: bool
    shown: int
    size: int

    @property
    def cut(self) -> bool:
        return self.shown < self.size


def preview(body: bytes, limit: int) -> Preview:
    """At most `limit` bytes of a body: as text when they are UTF-8, else as hex."""
    head = body[:limit]
    for trim in range(4):  # a multi-byte character may be cut at the limit
        part = head[: len(head) - trim] if trim else head
        try:
            text = part.decode("utf-8")
        except UnicodeDecodeError:
            if len(head) < len(body):
                continue
            break
        if all(c.isprintable() or c in "\n\r\t" for c in text):
            return Preview(text, True, len(part), len(body))
        break
    half = head[: limit // 2]
    return Preview(half.hex(" "), False, len(half), len(body))


def origin_topic(msg: MessageExt) -> str:
    """Where a retry or DLQ copy came from; the topic itself for any other message."""
    if msg.topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
        return msg.properties.get(record.PROPERTY_RETRY_TOPIC) or msg.properties.get(
            "DLQ_ORIGIN_TOPIC", msg.topic
        )
    return msg.topic


def messages_page(request: Request) -> Response:
    st = console(request)
    limit = st.config.max_query_messages
    mode = param(request, "mode", "time")
    if mode not in MODES:
        raise BadRequest(f"mode must be one of {', '.join(MODES)}")
    topic = param(request, "topic")
    now = int(time.time() * 1000)
    begin_raw = param(request, "begin") or fmt_input(now - DEFAULT_WINDOW_MS)
    end_raw = param(request, "end") or fmt_input(now + 60_000)
    form_values = {
        "mode": mode,
        "topic": topic,
        "begin": begin_raw,
        "end": end_raw,
        "id": param(request, "id"),
        "key": param(request, "key"),
    }
    found: list[MessageExt] | None = None
    asked = bool(topic or form_values["id"])
    if asked:
        if mode == "time":
            check_topic(topic)
            begin, end = parse_time("begin", begin_raw), parse_time("end", end_raw)
            if begin > end:
                raise BadRequest("begin is after end")
            found = list(itertools.islice(st.admin.print_msg(topic, begin, end), limit))
        elif mode == "id":
            if not form_values["id"]:
                raise BadRequest("give a message id")
            if topic:
                check_topic(topic)
            found = st.admin.query_msg_by_id(form_values["id"], topic or None)[:limit]
        else:
            check_topic(topic)
            if not form_values["key"]:
                raise BadRequest("give a key")
            begin, end = parse_time("begin", begin_raw), parse_time("end", end_raw)
            found = st.admin.query_msg_by_key(
                topic, form_values["key"], max_num=limit, begin_ms=begin, end_ms=end
            )
    rows = [(m, preview(m.body, LIST_PREVIEW_CHARS)) for m in found or []]
    return st.renderer.page("messages.html", form=form_values, rows=rows, asked=asked, limit=limit)


def message_page(request: Request) -> Response:
    st = console(request)
    offset_msg_id = request.path_params["offset_msg_id"]
    msg = st.admin.view_message(offset_msg_id)
    return st.renderer.page(
        "message.html",
        msg=msg,
        body=preview(msg.body, st.config.body_preview_bytes),
        props=sorted(msg.properties.items()),
        origin=origin_topic(msg),
        resent=None,
    )


async def resend(request: Request) -> Response:
    """Sends a copy of a stored message (body, tags, keys, user properties) to a topic: by
    default its origin topic, so a dead letter goes back to where it failed."""
    st = console(request)
    if not same_origin(request):
        raise BadRequest("cross-site form refused")
    offset_msg_id = request.path_params["offset_msg_id"]
    fields = await form(request)
    msg = await run_in_threadpool(st.admin.view_message, offset_msg_id)
    target = fields.get("topic") or origin_topic(msg)
    check_topic(target)
    props = {k: v for k, v in msg.properties.items() if k not in SYSTEM_PROPERTIES}
    props[RESEND_OF] = msg.msg_id
    copy = Message(target, msg.body, tags=msg.tags, keys=msg.keys, properties=props)
    result = await run_in_threadpool(lambda: st.producer().send(copy))
    return st.renderer.page(
        "message.html",
        msg=msg,
        body=preview(msg.body, st.config.body_preview_bytes),
        props=sorted(msg.properties.items()),
        origin=origin_topic(msg),
        resent=result,
    )


def dlq_page(request: Request) -> Response:
    st = console(request)
    rows = []
    for topic in sorted(t for t in st.admin.topic_list() if t.startswith(DLQ_PREFIX)):
        try:
            stats = st.admin.topic_stats(topic)
            count = sum(q.max_offset - q.min_offset for qs in stats.values() for q in qs)
        except FerryError:
            count = -1
        rows.append((topic, topic[len(DLQ_PREFIX) :], count))
    return st.renderer.page("dlq.html", rows=rows, begin=fmt_input(0))
