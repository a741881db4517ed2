"""Queries the store answers for clients and admin tools: offset by timestamp, message by
CommitLog offset (offset message ids), ConsumeQueue entries (queryCq), and running retention
now; and the ha-replicator's status (haStatus). Remoting checks what it
knows (the topic), forwards the request untouched and relays the store's reply and payload."""

from __future__ import annotations

from typing import Any

from ferry.protocol.errors import BrokerSystemError, InvalidParameterError, TopicNotExistError
from ferry.protocol.messages import (
    MAX_CQ_ENTRIES,
    AnyReply,
    AnyRequest,
    ConsumeQueueReply,
    DeleteExpiredCommitLogRequest,
    ErrorReply,
    GetBrokerHaStatusRequest,
    HaStatusReply,
    HaStatusRequest,
    OffsetReply,
    OkReply,
    QueryConsumeQueueRequest,
    Reply,
    SearchOffsetByTimestampRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.names import check_topic
from ferry.remoting.calls import Caller
from ferry.remoting.topic_table import TopicTable
from ferry.runtime.service import Peer

STORE_QUERY_TIMEOUT_S = 5.0
# retention deletes files and may wait for a flush: give it longer
STORE_DELETE_TIMEOUT_S = 30.0


class StoreQueryProcessor:
    def __init__(self, topics: TopicTable, store: Peer, ha: Peer) -> None:
        self._topics = topics
        self._store = store
        self._ha = ha

    def search_offset(self, req: SearchOffsetByTimestampRequest, call: Caller) -> None:
        if self._topics.get(req.topic) is None:
            check_topic(req.topic)
            raise TopicNotExistError(f"topic {req.topic!r} does not exist on this broker")
        self._forward(req, call, OffsetReply, STORE_QUERY_TIMEOUT_S)

    def query_cq(self, req: QueryConsumeQueueRequest, call: Caller) -> None:
        """mqadmin queryCq: the store reads the entries; remoting knows the queue count."""
        config = self._topics.get(req.topic)
        if config is None:
            check_topic(req.topic)
            raise TopicNotExistError(f"topic {req.topic!r} does not exist on this broker")
        queues = max(config.read_queue_nums, config.write_queue_nums)
        if not 0 <= req.queue_id < queues:
            raise InvalidParameterError(
                f"queue {req.queue_id} is not a queue of {req.topic} (0..{queues - 1})"
            )
        if req.index < 0 or not 0 < req.count <= MAX_CQ_ENTRIES:
            raise InvalidParameterError(
                f"index {req.index}, count {req.count}: want index >= 0, count 1..{MAX_CQ_ENTRIES}"
            )
        self._forward(req, call, ConsumeQueueReply, STORE_QUERY_TIMEOUT_S)

    def ha_status(self, _req: GetBrokerHaStatusRequest, call: Caller) -> None:
        """mqadmin haStatus: the group's ha-replicator answers."""
        self._forward(HaStatusRequest(), call, HaStatusReply, STORE_QUERY_TIMEOUT_S, self._ha)

    def view_message(self, req: ViewMessageRequest, call: Caller) -> None:
        self._forward(req, call, ViewMessageReply, STORE_QUERY_TIMEOUT_S)

    def delete_expired(self, req: DeleteExpiredCommitLogRequest, call: Caller) -> None:
        self._forward(req, call, OkReply, STORE_DELETE_TIMEOUT_S)

    def _forward(
        self,
        req: AnyRequest,
        call: Caller,
        expected: type[Reply],
        timeout_s: float,
        peer: Peer | None = None,
    ) -> None:
        def on_reply(body: AnyReply, frames: list[Any]) -> None:
            if isinstance(body, (expected, ErrorReply)):
                call.reply(body, frames or None)
            else:
                call.fail(BrokerSystemError(f"store answered with {type(body).__name__}"))

        (peer or self._store).request(req, on_reply, timeout_s=timeout_s)
