"""The store's gets and long polling: a get that finds nothing new and asks to be suspended
is held (long_poll.py) until a put or a raw append to its queue wakes it, a confirm offset
lets it read further (allAckInSyncStateSet), or its time is up."""

from __future__ import annotations

import time

from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import FerryError, InvalidParameterError
from ferry.protocol.messages import (
    OkReply,
    StoreConfirmOffsetRequest,
    StoreGetReply,
    StoreGetRequest,
)
from ferry.protocol.names import check_topic
from ferry.runtime.service import Call, HandlerResult
from ferry.store.long_poll import LongPollTable
from ferry.store.store import GetResult, MessageStore

# a get asks for up to this much whatever it names: the native walk takes a C size, and a
# reply past the frame limit could not be sent anyway
MAX_GET_BYTES = 64 * 1024 * 1024


class GetHandlers:
    def __init__(self, store: MessageStore, gated: bool) -> None:
        self.store = store
        self._polls: LongPollTable[Call] = LongPollTable()
        # allAckInSyncStateSet: a put wakes no reader; remoting's confirm of it does
        self._gated = gated

    def get(self, req: StoreGetRequest, call: Call) -> HandlerResult:
        check_topic(req.topic)
        if req.queue_id < 0:
            raise InvalidParameterError(f"queue id {req.queue_id} is out of range")
        if req.max_msgs < 1:
            raise InvalidParameterError(f"max_msgs must be at least 1, not {req.max_msgs}")
        result = self._read(req)
        if result.status == PullStatus.NO_NEW_MSG and req.suspend_ms > 0:
            self._polls.hold(req.topic, req.queue_id, call, time.monotonic(), req.suspend_ms)
            return None
        return self._get_reply(result, req.ranges)

    def _read(self, req: StoreGetRequest) -> GetResult:
        return self.store.get(
            req.topic,
            req.queue_id,
            req.queue_offset,
            req.max_msgs,
            min(req.max_bytes, MAX_GET_BYTES),
            req.tag_codes,
            payload=not req.ranges,
            sql=req.sql,
        )

    @staticmethod
    def _get_reply(result: GetResult, ranges: bool) -> HandlerResult:
        reply = StoreGetReply(
            status=result.status,
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
            count=result.count,
            runs=result.runs if ranges and result.runs else [],
        )
        if result.status == PullStatus.FOUND and not ranges:
            return reply, [result.payload]
        return reply

    def _answer_held(self, calls: list[Call]) -> None:
        for call in calls:
            self._read_again(call)

    def _read_again(self, call: Call, deadline: float | None = None) -> None:
        """Answers a held get with what it reads now; with a deadline, one that still finds
        nothing new is held on until then."""
        req = call.request
        assert isinstance(req, StoreGetRequest)
        try:
            result = self._read(req)
        except FerryError as err:
            call.fail(err)
            return
        if deadline is not None and result.status == PullStatus.NO_NEW_MSG:
            self._polls.hold_until(req.topic, req.queue_id, call, deadline)
            return
        answer = self._get_reply(result, req.ranges)
        if isinstance(answer, tuple):
            call.reply(answer[0], answer[1])
        elif answer is not None:
            call.reply(answer)

    def wake(self, topic: str, queue_id: int) -> None:
        if len(self._polls) and not self._gated:
            self._answer_held(self._polls.take(topic, queue_id))

    def confirm(self, req: StoreConfirmOffsetRequest, _call: Call) -> OkReply:
        if req.offset < 0:
            raise InvalidParameterError(f"confirm offset {req.offset} is negative")
        if self.store.confirm(req.offset) and len(self._polls):
            # which queues the newly confirmed records belong to is not known here: every
            # held read looks again, and those still empty wait on until their deadline
            for held in self._polls.take_all_held():
                self._read_again(held.item, held.deadline)
        return OkReply()

    def expire_polls(self) -> None:
        if len(self._polls):
            self._answer_held(self._polls.expired(time.monotonic()))

    def close(self) -> None:
        """Answers every held get with what it reads now (a clean stop)."""
        self._answer_held(self._polls.take_all())
