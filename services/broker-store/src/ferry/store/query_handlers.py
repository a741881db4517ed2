"""The store's lookups: queue offsets, log reads for followers, status, offsets by time,
ConsumeQueue entries and single messages (mqadmin's queryCq, viewMessage). Each answers at
once from the store."""

from __future__ import annotations

import msgspec

from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import (
    MAX_CQ_ENTRIES,
    ConsumeQueueReply,
    OffsetReply,
    QueryConsumeQueueRequest,
    SearchOffsetByTimestampRequest,
    StoreQueueOffsetsReply,
    StoreQueueOffsetsRequest,
    StoreReadLogReply,
    StoreReadLogRequest,
    StoreStatusReply,
    StoreStatusRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.names import check_topic
from ferry.runtime.service import Call, HandlerResult
from ferry.store.commit_service import CommitService
from ferry.store.store import MessageStore


class QueryHandlers:
    def __init__(self, store: MessageStore, commit: CommitService) -> None:
        self.store = store
        self._commit = commit

    def queue_offsets(self, req: StoreQueueOffsetsRequest, _call: Call) -> HandlerResult:
        return StoreQueueOffsetsReply(self.store.queue_stats(req.topic, req.queue_ids))

    def read_log(self, req: StoreReadLogRequest, _call: Call) -> HandlerResult:
        result = self.store.read_log(req.from_offset, req.max_bytes)
        reply = StoreReadLogReply(
            from_offset=result.from_offset,
            next_offset=result.next_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
            recovered_offset=self.store.recovered_offset,
        )
        return reply, [result.payload]

    def status(self, req: StoreStatusRequest, _call: Call) -> StoreStatusReply:
        total, free = self.store.retention.disk.capacity()
        return msgspec.structs.replace(
            self.store.status(),
            log_syncs=self._commit.flusher.log_syncs,
            disk_total_bytes=total,
            disk_free_bytes=free,
            held_queues=self.store.held_queues() if req.held_queues else {},
        )

    def search_offset(self, req: SearchOffsetByTimestampRequest, _call: Call) -> OffsetReply:
        check_topic(req.topic)
        return OffsetReply(self.store.search_offset(req.topic, req.queue_id, req.timestamp_ms))

    def query_cq(self, req: QueryConsumeQueueRequest, _call: Call) -> ConsumeQueueReply:
        check_topic(req.topic)
        if req.index < 0 or not 0 < req.count <= MAX_CQ_ENTRIES or req.queue_id < 0:
            raise InvalidParameterError(
                f"queue {req.queue_id}, index {req.index}, count {req.count}: want queue >= 0, "
                f"index >= 0 and count 1..{MAX_CQ_ENTRIES}"
            )
        return self.store.query_cq(req.topic, req.queue_id, req.index, req.count)

    def view_message(self, req: ViewMessageRequest, _call: Call) -> HandlerResult:
        data = self.store.view(req.phys_offset)
        return ViewMessageReply(phys_offset=req.phys_offset, size=len(data)), [data]
