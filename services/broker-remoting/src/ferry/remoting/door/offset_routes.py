"""The door's offset codes, served by the ConsumerManager and the StoreQueryProcessor:
QUERY_CONSUMER_OFFSET (14; a group with no offset there is answered QUERY_NOT_FOUND, 22, and
a RocketMQ consumer then starts where its consumeFromWhere says), UPDATE_CONSUMER_OFFSET (15),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31). Offsets go out as
the ext field `offset`, a string."""

from __future__ import annotations

from typing import Any

from ferry.protocol.messages import (
    GetMaxOffsetRequest,
    GetMinOffsetRequest,
    OffsetEntry,
    OffsetReply,
    QueryConsumerOffsetRequest,
    SearchOffsetByTimestampRequest,
    UpdateConsumerOffsetRequest,
)
from ferry.protocol.rocketmq.codes import RequestCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.protocol.rocketmq.fields import ext, ext_int, ok
from ferry.runtime.remoting_door import DoorCall, Route


def _query(cmd: RemotingCommand, _call: DoorCall) -> QueryConsumerOffsetRequest:
    return QueryConsumerOffsetRequest(
        consumer_group=ext(cmd, "consumerGroup"),
        topic=ext(cmd, "topic"),
        queue_id=ext_int(cmd, "queueId"),
    )


def _update(cmd: RemotingCommand, _call: DoorCall) -> UpdateConsumerOffsetRequest:
    entry = OffsetEntry(ext(cmd, "topic"), ext_int(cmd, "queueId"), ext_int(cmd, "commitOffset"))
    return UpdateConsumerOffsetRequest(consumer_group=ext(cmd, "consumerGroup"), entries=[entry])


def _search(cmd: RemotingCommand, _call: DoorCall) -> SearchOffsetByTimestampRequest:
    return SearchOffsetByTimestampRequest(
        topic=ext(cmd, "topic"),
        queue_id=ext_int(cmd, "queueId"),
        timestamp_ms=ext_int(cmd, "timestamp"),
    )


def _max(cmd: RemotingCommand, _call: DoorCall) -> GetMaxOffsetRequest:
    return GetMaxOffsetRequest(topic=ext(cmd, "topic"), queue_id=ext_int(cmd, "queueId"))


def _min(cmd: RemotingCommand, _call: DoorCall) -> GetMinOffsetRequest:
    return GetMinOffsetRequest(topic=ext(cmd, "topic"), queue_id=ext_int(cmd, "queueId"))


def _offset(cmd: RemotingCommand, reply: OffsetReply, _payload: list[Any]) -> RemotingCommand:
    return ok(cmd, offset=str(reply.offset))


def _done(cmd: RemotingCommand, _reply: Any, _payload: list[Any]) -> RemotingCommand:
    return ok(cmd)


def routes() -> dict[int, Route]:
    return {
        RequestCode.QUERY_CONSUMER_OFFSET: Route(_query, _offset),
        RequestCode.UPDATE_CONSUMER_OFFSET: Route(_update, _done),
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: Route(_search, _offset),
        RequestCode.GET_MAX_OFFSET: Route(_max, _offset),
        RequestCode.GET_MIN_OFFSET: Route(_min, _offset),
    }
