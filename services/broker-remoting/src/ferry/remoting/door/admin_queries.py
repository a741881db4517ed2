"""The door's admin queries about clients, progress and messages (see admin.py):

- GET_CONSUMER_CONNECTION_LIST (203; a ConsumerConnection, or CONSUMER_NOT_ONLINE, 206, for
  a group with no live member), GET_PRODUCER_CONNECTION_LIST (204; a ProducerConnection, or
  SYSTEM_ERROR for a group with no live producer, as RocketMQ answers);
- QUERY_TOPIC_CONSUME_BY_WHO (300; a GroupList);
- GET_CONSUME_STATS (208; a ConsumeStats): the group's topics (the header's topic or
  topicList, else every topic it consumes here, narrowed to its live members' subscriptions
  when it has any), each read queue's max offset and the group's committed offset, put
  together from several of the processors' requests (asks.py). lastTimestamp is the queue's
  last store time once the group has consumed everything, 0 otherwise: Ferry does not look
  up the store time of the message at the committed offset;
- QUERY_MESSAGE (12; by key, or by UNIQ_KEY with `_UNIQUE_KEY_QUERY`: the stored records as
  the body, QUERY_NOT_FOUND when none), VIEW_MESSAGE_BY_ID (33; the header's CommitLog
  offset: the stored record as the body).
"""

from __future__ import annotations

from typing import Any

from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import (
    AnyReply,
    BrokerStatsReply,
    ConsumerConnectionReply,
    GetAllTopicConfigRequest,
    GetBrokerStatsRequest,
    GetConsumerConnectionListRequest,
    GetProducerConnectionListRequest,
    GetTopicStatsRequest,
    GroupListReply,
    OffsetReply,
    ProducerConnectionReply,
    QueryConsumerOffsetRequest,
    QueryMessageReply,
    QueryMessageRequest,
    QueryTopicConsumeByWhoRequest,
    TopicConfig,
    TopicConfigListReply,
    TopicStatsReply,
    ViewMessageRequest,
)
from ferry.protocol.names import check_group
from ferry.protocol.rocketmq.codes import RequestCode, ResponseCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.protocol.rocketmq.fields import SUCCESS, ext, ext_bool, ext_int, ok
from ferry.remoting.calls import Handler
from ferry.remoting.door import admin_json as shapes
from ferry.remoting.door.asks import Asks
from ferry.runtime.remoting_door import DoorCall, Route

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
UNIQUE_KEY_MAX_NUM = 32  # RocketMQ's defaultQueryMaxNum, taken for every UNIQ_KEY query


def _joined(payload: list[Any]) -> bytes:
    return b"".join(bytes(p) for p in payload)


# ---- connections and groups ----


def _consumers(cmd: RemotingCommand, reply: ConsumerConnectionReply, _p: Any) -> RemotingCommand:
    if not reply.connections:
        group = ext(cmd, "consumerGroup")
        return cmd.response(
            ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
        )
    return ok(
        cmd,
        {
            "connectionSet": [shapes.connection_json(c) for c in reply.connections],
            "subscriptionTable": {
                s.topic: shapes.subscription_json(s) for s in reply.subscriptions
            },
            "consumeType": shapes.CONSUME_TYPES.get(reply.consume_type, "CONSUME_ACTIVELY"),
            "messageModel": reply.message_model or "CLUSTERING",
            "consumeFromWhere": shapes.CONSUME_FROM.get(
                reply.consume_from, "CONSUME_FROM_LAST_OFFSET"
            ),
        },
    )


def _producers(cmd: RemotingCommand, reply: ProducerConnectionReply, _p: Any) -> RemotingCommand:
    if not reply.connections:
        group = ext(cmd, "producerGroup")
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
    return ok(cmd, {"connectionSet": [shapes.connection_json(c) for c in reply.connections]})


def _group_list(cmd: RemotingCommand, reply: GroupListReply, _p: Any) -> RemotingCommand:
    return ok(cmd, {"groupList": reply.groups})


# ---- messages ----


def _query_message(cmd: RemotingCommand, _call: DoorCall) -> QueryMessageRequest:
    unique = ext_bool(cmd, UNIQUE_KEY_QUERY)
    return QueryMessageRequest(
        topic=ext(cmd, "topic"),
        key=ext(cmd, "key"),
        unique=unique,
        begin_ms=ext_int(cmd, "beginTimestamp"),
        end_ms=ext_int(cmd, "endTimestamp"),
        max_num=UNIQUE_KEY_MAX_NUM if unique else ext_int(cmd, "maxNum"),
    )


def _messages(cmd: RemotingCommand, reply: QueryMessageReply, payload: Any) -> RemotingCommand:
    fields = {
        "indexLastUpdateTimestamp": str(reply.index_last_ms),
        "indexLastUpdatePhyoffset": str(reply.index_offset),
    }
    if reply.count == 0:
        return cmd.response(
            ResponseCode.QUERY_NOT_FOUND,
            "can not find message, maybe time range not correct",
            ext_fields=fields,
        )
    return cmd.response(SUCCESS, ext_fields=fields, body=_joined(payload))


def _view(cmd: RemotingCommand, _call: DoorCall) -> ViewMessageRequest:
    offset = ext_int(cmd, "offset")
    if offset < 0:
        raise InvalidParameterError(f"offset {offset} is negative")
    return ViewMessageRequest(phys_offset=offset)


def _one_message(cmd: RemotingCommand, _reply: Any, payload: Any) -> RemotingCommand:
    return cmd.response(SUCCESS, body=_joined(payload))


# ---- consume stats ----


class _ConsumeStats:
    """One GET_CONSUME_STATS, asked of the processors in three rounds."""

    def __init__(self, asks: Asks, broker_name: str, cmd: RemotingCommand, call: DoorCall):
        self._asks = asks
        self._broker_name = broker_name
        self._call = call
        self._cmd = cmd
        self.group = ext(cmd, "consumerGroup")
        check_group(self.group)
        listed = [t for t in cmd.ext_fields.get("topicList", "").split(";") if t]
        topic = cmd.ext_fields.get("topic", "")
        self._listed = listed or ([topic] if topic else [])
        self._narrow = not listed  # RocketMQ takes a topicList as it is
        self._configs: dict[str, TopicConfig] = {}
        self._subscribed: set[str] = set()
        self._tps: dict[str, float] = {}

    def start(self) -> None:
        first = [
            GetAllTopicConfigRequest(),
            GetConsumerConnectionListRequest(consumer_group=self.group),
            GetBrokerStatsRequest(),
        ]
        self._asks.all(self._call, first, self._known)

    def _known(self, replies: list[AnyReply]) -> None:
        configs, members, stats = replies
        if not isinstance(configs, TopicConfigListReply):
            self._call.reply(configs)  # the ErrorReply
            return
        self._configs = {c.topic_name: c for c in configs.topics}
        if isinstance(members, ConsumerConnectionReply):
            self._subscribed = {s.topic for s in members.subscriptions}
        if isinstance(stats, BrokerStatsReply):
            for t in stats.get:
                if t.group == self.group:
                    self._tps[t.topic] = self._tps.get(t.topic, 0.0) + t.tps
        if self._listed:
            self._collect(self._listed)
            return
        names = sorted(self._configs)
        asked = [QueryTopicConsumeByWhoRequest(topic=t) for t in names]
        self._asks.all(
            self._call,
            asked,
            lambda got: self._collect(
                [
                    t
                    for t, r in zip(names, got, strict=True)
                    if isinstance(r, GroupListReply) and self.group in r.groups
                ]
            ),
        )

    def _collect(self, topics: list[str]) -> None:
        if self._narrow and self._subscribed:
            topics = [t for t in topics if t in self._subscribed]
        topics = [t for t in topics if t in self._configs]
        queues = [(t, q) for t in topics for q in range(self._configs[t].read_queue_nums)]
        asked: list[Any] = [GetTopicStatsRequest(topic=t) for t in topics]
        asked += [
            QueryConsumerOffsetRequest(consumer_group=self.group, topic=t, queue_id=q)
            for t, q in queues
        ]
        self._asks.all(self._call, asked, lambda got: self._answer(topics, queues, got))

    def _answer(
        self, topics: list[str], queues: list[tuple[str, int]], got: list[AnyReply]
    ) -> None:
        tops: dict[tuple[str, int], tuple[int, int]] = {}  # max offset, last store time
        for topic, stats in zip(topics, got[: len(topics)], strict=True):
            if isinstance(stats, TopicStatsReply):
                for q in stats.queues:
                    tops[(topic, q.queue_id)] = (max(0, q.max_offset), q.last_store_ms)
        entries = []
        for (topic, queue_id), reply in zip(queues, got[len(topics) :], strict=True):
            # a queue the group never committed on counts from 0, as RocketMQ shows it
            consumed = reply.offset if isinstance(reply, OffsetReply) else 0
            top, last_ms = tops.get((topic, queue_id), (0, 0))
            entries.append(
                (
                    shapes.queue_key(topic, self._broker_name, queue_id),
                    {
                        "brokerOffset": top,
                        "consumerOffset": consumed,
                        "pullOffset": consumed,
                        "lastTimestamp": last_ms if top > 0 and consumed >= top else 0,
                    },
                )
            )
        tps = sum(self._tps.get(t, 0.0) for t in topics)
        body = (
            b'{"consumeTps":'
            + repr(float(tps)).encode()
            + b',"offsetTable":'
            + shapes.table_with_queue_keys(entries)
            + b"}"
        )
        self._call.relay(self._cmd.response(SUCCESS, body=body))


def _consume_stats(asks: Asks, broker_name: str) -> Route:
    def request(cmd: RemotingCommand, call: DoorCall) -> None:
        _ConsumeStats(asks, broker_name, cmd, call).start()

    def unused(cmd: RemotingCommand, reply: Any, _p: Any) -> RemotingCommand:
        # only an ErrorReply comes here (handled by the door); the stats set their own
        del reply
        return cmd.response(ResponseCode.SYSTEM_ERROR, "no consume stats")

    return Route(request, unused)


def routes(handlers: dict[type, Handler], broker_name: str) -> dict[int, Route]:
    asks = Asks(handlers)
    return {
        RequestCode.GET_CONSUMER_CONNECTION_LIST: Route(
            lambda c, _call: GetConsumerConnectionListRequest(
                consumer_group=ext(c, "consumerGroup")
            ),
            _consumers,
        ),
        RequestCode.GET_PRODUCER_CONNECTION_LIST: Route(
            lambda c, _call: GetProducerConnectionListRequest(
                producer_group=ext(c, "producerGroup")
            ),
            _producers,
        ),
        RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: Route(
            lambda c, _call: QueryTopicConsumeByWhoRequest(topic=ext(c, "topic")), _group_list
        ),
        RequestCode.GET_CONSUME_STATS: _consume_stats(asks, broker_name),
        RequestCode.QUERY_MESSAGE: Route(_query_message, _messages),
        RequestCode.VIEW_MESSAGE_BY_ID: Route(_view, _one_message),
    }
