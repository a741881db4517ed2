"""INVOKE_BROKER_TO_RESET_OFFSET (222): mqadmin resetOffsetByTime and the dashboard's reset of
a group's offsets, on this broker's queues of the topic.

Header: topic, group, timestamp (ms), isForce; or queueId with offset, for one queue. Each
read queue's offset is searched for the timestamp (SEARCH_OFFSET_BY_TIMESTAMP's request);
without isForce a queue the group has not yet consumed up to there keeps its offset (only
rewinds), as RocketMQ does. The offsets are set through the processors' ResetOffsetRequest,
which tells the group's live members (for RocketMQ clients RESET_CONSUMER_CLIENT_OFFSET, 220:
notices.py), and the answer is RocketMQ's ResetOffsetBody, {"offsetTable": {queue: offset}}."""

from __future__ import annotations

from typing import Any

from ferry.protocol.errors import InvalidParameterError, TopicNotExistError
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    GetAllTopicConfigRequest,
    OffsetEntry,
    OffsetReply,
    QueryConsumerOffsetRequest,
    ResetOffsetRequest,
    SearchOffsetByTimestampRequest,
    TopicConfigListReply,
)
from ferry.protocol.rocketmq.codes import RequestCode, ResponseCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.protocol.rocketmq.fields import ext, ext_int
from ferry.remoting.door import admin_json as shapes
from ferry.remoting.door.asks import Asks
from ferry.runtime.call import Payload
from ferry.runtime.remoting_door import DoorCall, Route


class _Reset:
    def __init__(self, asks: Asks, broker_name: str, cmd: RemotingCommand, call: DoorCall):
        self._asks = asks
        self._broker = broker_name
        self._cmd = cmd
        self._call = call
        self.topic = ext(cmd, "topic")
        self.group = ext(cmd, "group")
        self.force = cmd.ext_fields.get("isForce", "true").lower() != "false"
        self.one_queue = max(ext_int(cmd, "queueId", -1), -1)  # -1: every read queue
        self.timestamp = ext_int(cmd, "timestamp", -1)
        self.offset = ext_int(cmd, "offset", -1)
        if self.one_queue < 0 and self.timestamp < 0:
            raise InvalidParameterError("a reset needs a timestamp, or a queueId and offset")

    def start(self) -> None:
        self._asks.all(self._call, [GetAllTopicConfigRequest()], self._configs)

    def _configs(self, replies: list[AnyReply]) -> None:
        [configs] = replies
        if not isinstance(configs, TopicConfigListReply):
            self._call.reply(configs)
            return
        config = next((c for c in configs.topics if c.topic_name == self.topic), None)
        if config is None:
            self._call.fail(TopicNotExistError(f"topic {self.topic} not exist on this broker"))
            return
        queues = [self.one_queue] if self.one_queue >= 0 else list(range(config.read_queue_nums))
        asked: list[Any] = [
            QueryConsumerOffsetRequest(consumer_group=self.group, topic=self.topic, queue_id=q)
            for q in queues
        ]
        if self.one_queue < 0 or self.offset < 0:
            asked += [
                SearchOffsetByTimestampRequest(
                    topic=self.topic, queue_id=q, timestamp_ms=self.timestamp
                )
                for q in queues
            ]
        self._asks.all(self._call, asked, lambda got: self._offsets(queues, got))

    def _offsets(self, queues: list[int], got: list[AnyReply]) -> None:
        current = got[: len(queues)]
        found = got[len(queues) :]
        entries = []
        for i, queue_id in enumerate(queues):
            if found:
                reply = found[i]
                if not isinstance(reply, OffsetReply):
                    self._call.reply(reply)
                    return
                target = reply.offset
            else:
                target = self.offset
            now = current[i]
            # without isForce only a rewind: a group behind the target keeps its offset
            if not self.force and isinstance(now, OffsetReply) and now.offset <= target:
                continue
            entries.append(OffsetEntry(self.topic, queue_id, target))
        request = ResetOffsetRequest(
            consumer_group=self.group,
            topic=self.topic,
            offsets=entries,
            timestamp_ms=self.timestamp,
        )
        self._asks.one(self._call, request, lambda reply, _p: self._answer(reply, entries))

    def _answer(self, reply: AnyReply, entries: list[OffsetEntry]) -> None:
        if isinstance(reply, ErrorReply):
            self._call.reply(reply)
            return
        table = shapes.table_with_queue_keys(
            (shapes.queue_key(e.topic, self._broker, e.queue_id), e.offset) for e in entries
        )
        body = b'{"offsetTable":' + table + b"}"
        self._call.relay(self._cmd.response(ResponseCode.SUCCESS, body=body))


def routes(asks: Asks, broker_name: str) -> dict[int, Route]:
    def request(cmd: RemotingCommand, call: DoorCall) -> None:
        _Reset(asks, broker_name, cmd, call).start()

    def unused(cmd: RemotingCommand, _reply: Any, _payload: Payload) -> RemotingCommand:
        # only an ErrorReply comes here (handled by the door); the reset answers itself
        return cmd.response(ResponseCode.SYSTEM_ERROR, "no reset")

    return {RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: Route(request, unused)}
