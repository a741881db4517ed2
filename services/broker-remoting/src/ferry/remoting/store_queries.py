"""Queries the store answers for clients and admin tools: offset by timestamp, message by
CommitLog offset (offset message ids), and running retention now. Remoting checks what it
knows (the topic), forwards the request untouched and relays the store's reply and payload."""

from __future__ import annotations

from typing import Any

from ferry.protocol.errors import BrokerSystemError, TopicNotExistError
from ferry.protocol.messages import (
    AnyReply,
    AnyRequest,
    DeleteExpiredCommitLogRequest,
    ErrorReply,
    OffsetReply,
    OkReply,
    Reply,
    SearchOffsetByTimestampRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.names import check_topic
from ferry.remoting.topic_table import TopicTable
from ferry.runtime.service import Call, Peer

STORE_QUERY_TIMEOUT_S = 5.0
# retention deletes files and may wait for a flush: give it longer
STORE_DELETE_TIMEOUT_S = 30.0


class StoreQueryProcessor:
    def __init__(self, topics: TopicTable, store: Peer) -> None:
        self._topics = topics
        self._store = store

    def search_offset(self, req: SearchOffsetByTimestampRequest, call: Call) -> None:
        if self._topics.get(req.topic) is None:
            check_topic(req.topic)
            raise TopicNotExistError(f"topic {req.topic!r} does not exist on this broker")
        self._forward(req, call, OffsetReply, STORE_QUERY_TIMEOUT_S)

    def view_message(self, req: ViewMessageRequest, call: Call) -> None:
        self._forward(req, call, ViewMessageReply, STORE_QUERY_TIMEOUT_S)

    def delete_expired(self, req: DeleteExpiredCommitLogRequest, call: Call) -> None:
        self._forward(req, call, OkReply, STORE_DELETE_TIMEOUT_S)

    def _forward(
        self, req: AnyRequest, call: Call, expected: type[Reply], timeout_s: float
    ) -> None:
        def on_reply(body: AnyReply, frames: list[Any]) -> None:
            if isinstance(body, (expected, ErrorReply)):
                call.reply(body, frames or None)
            else:
                call.fail(BrokerSystemError(f"store answered with {type(body).__name__}"))

        self._store.request(req, on_reply, timeout_s=timeout_s)
