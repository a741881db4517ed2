"""QUERY_MESSAGE: messages by key or unique key within a time range, from the broker's index.

The index answers with candidate CommitLog offsets (newest first); remoting reads each record
from the store (VIEW_MESSAGE_BY_ID, all in flight at once), keeps those that really carry the
key (64-bit hashes can collide, the log's start may have moved) and answers with the records
in one payload frame, newest first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ferry.protocol import record
from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import (
    BrokerSystemError,
    ServiceNotAvailableError,
)
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    IndexQueryReply,
    IndexQueryRequest,
    QueryMessageReply,
    QueryMessageRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.messages.index import check_query
from ferry.remoting.calls import Caller
from ferry.runtime.service import Peer

INDEX_TIMEOUT_S = 5.0
VIEW_TIMEOUT_S = 5.0
VIEW_WINDOW = 32  # records of one query read from the store at a time


def carries_key(raw: bytes, req: QueryMessageRequest) -> bool:
    """Whether a stored record is of the topic and carries the key the query asks for."""
    try:
        rec = next(record.iter_records(raw), None)
    except (record.RecordError, UnicodeDecodeError, ValueError):
        return False
    if rec is None or rec.topic != req.topic:
        return False
    if req.unique:
        return rec.properties.get(record.PROPERTY_UNIQ_KEY) == req.key
    return req.key in (rec.properties.get(record.PROPERTY_KEYS) or "").split()


class _Gather:
    """The records of one query's hits, read from the store VIEW_WINDOW at a time (a query of
    a thousand hits must not fill the store's queue ahead of sends and pulls)."""

    def __init__(
        self, call: Caller, req: QueryMessageRequest, index: IndexQueryReply, store: Peer
    ) -> None:
        self.call = call
        self.req = req
        self.index = index
        self.store = store
        self.records: list[bytes | None] = [None] * len(index.hits)
        self.next = 0  # the next hit to read
        self.in_flight = 0
        self.failed: ErrorReply | None = None

    def read(self) -> None:
        if not self.index.hits:
            self._answer()
            return
        for _ in range(min(VIEW_WINDOW, len(self.index.hits))):
            self._read_next()

    def _read_next(self) -> None:
        i = self.next
        self.next += 1
        self.in_flight += 1
        self.store.request(
            ViewMessageRequest(phys_offset=self.index.hits[i].phys_offset),
            self._on_view_of(i),
            timeout_s=VIEW_TIMEOUT_S,
        )

    def _on_view_of(self, i: int) -> Callable[[AnyReply, list[Any]], None]:
        return lambda body, frames: self._on_view(i, body, frames)

    def _on_view(self, i: int, body: AnyReply, frames: list[Any]) -> None:
        if isinstance(body, ViewMessageReply) and frames:
            raw = bytes(frames[0])
            if carries_key(raw, self.req):
                self.records[i] = raw
        elif isinstance(body, ErrorReply):
            if body.code != ResponseCode.QUERY_NOT_FOUND:  # gone: retention took it
                self.failed = body
        else:
            self.failed = ErrorReply(
                code=ResponseCode.SYSTEM_ERROR,
                message=f"store answered a view with {type(body).__name__}",
                retriable=True,
            )
        self.in_flight -= 1
        if self.failed is None and self.next < len(self.index.hits):
            self._read_next()
        elif self.in_flight == 0:
            self._answer()

    def _answer(self) -> None:
        if self.failed is not None:
            self.call.reply(self.failed)
            return
        found = [r for r in self.records if r is not None]
        self.call.reply(
            QueryMessageReply(
                count=len(found),
                index_offset=self.index.applied_offset,
                index_last_ms=self.index.last_store_ms,
            ),
            [b"".join(found)],
        )


class MessageQueryProcessor:
    def __init__(self, store: Peer, index: Peer | None) -> None:
        """`index`: the index service (indexEndpoint), or None when the broker has none."""
        self._store = store
        self._index = index

    def query_message(self, req: QueryMessageRequest, call: Caller) -> None:
        check_query(req)
        if self._index is None:
            raise ServiceNotAvailableError(
                "this broker has no index: set indexEndpoint to its index service"
            )

        def on_hits(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, IndexQueryReply):
                _Gather(call, req, body, self._store).read()
            elif isinstance(body, ErrorReply):
                call.reply(body)
            else:
                call.fail(BrokerSystemError(f"index answered with {type(body).__name__}"))

        self._index.request(
            IndexQueryRequest(
                topic=req.topic,
                key=req.key,
                unique=req.unique,
                begin_ms=req.begin_ms,
                end_ms=req.end_ms,
                max_num=req.max_num,
            ),
            on_hits,
            timeout_s=INDEX_TIMEOUT_S,
            traceparent=call.traceparent,
            tracestate=call.tracestate,
        )
