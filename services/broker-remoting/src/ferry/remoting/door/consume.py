"""The door's consume routes (see door/__init__.py): what RocketMQ consumers ask, mapped onto
the processors' own requests (ConsumerManager, PullProcessor, SendBackProcessor, the queue
locks), so that membership, pulls, offsets and retries have one implementation.

- HEART_BEAT (34): body JSON HeartbeatData. consumeType, messageModel and consumeFromWhere
  come as names (Java) or as the C++ client's enum numbers; both map to Ferry's names. The
  client ids are kept on the connection (and the connection on DoorClients), so that a
  closed connection unregisters its clients, as RocketMQ does on channel close.
- UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38; body {"consumerIdList": [...]}),
  CONSUMER_SEND_MSG_BACK (36; the retry topic is made by the processor when missing),
  LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) (JSON bodies with mqSet);
- pull_route.py: PULL_MESSAGE (11); offset_routes.py: the offset codes (14, 15, 29, 30, 31).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import (
    ConsumerData,
    ConsumerListReply,
    ConsumerSendMsgBackRequest,
    GetConsumerListByGroupRequest,
    HeartbeatRequest,
    LockBatchReply,
    LockBatchRequest,
    OffsetEntry,
    SubscriptionData,
    UnlockBatchRequest,
    UnregisterClientRequest,
)
from ferry.protocol.rocketmq.codes import ONEWAY_FLAG, RequestCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.protocol.rocketmq.fields import ext, ext_int, ok
from ferry.remoting.door import notices, offset_routes, pull_route
from ferry.remoting.processors import BrokerProcessors
from ferry.runtime.remoting_door import DoorCall, RemotingDoor, Route
from ferry.runtime.tcp_door import Connection

CLIENT_IDS = "client_ids"  # conn.state key: ids of the clients whose heartbeats came on it

# RocketMQ's enums, by name (Java) and by ordinal (the C++ client's numbers)
_CONSUME_TYPES = {"CONSUME_ACTIVELY": "PULL", "CONSUME_PASSIVELY": "PUSH", "CONSUME_POP": "POP"}
_CONSUME_TYPE_NUMBERS = ("PULL", "PUSH", "POP")
_MODELS = {"BROADCASTING": "BROADCASTING", "CLUSTERING": "CLUSTERING"}
_MODEL_NUMBERS = ("BROADCASTING", "CLUSTERING")
# LAST_OFFSET, LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST, MIN_OFFSET, MAX_OFFSET, FIRST_OFFSET,
# TIMESTAMP: the deprecated ones as RocketMQ's broker reads them
_FROM_NUMBERS = (
    "LAST_OFFSET",
    "LAST_OFFSET",
    "FIRST_OFFSET",
    "LAST_OFFSET",
    "FIRST_OFFSET",
    "TIMESTAMP",
)
_FROM = {
    "CONSUME_FROM_LAST_OFFSET": "LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST": "LAST_OFFSET",
    "CONSUME_FROM_MIN_OFFSET": "FIRST_OFFSET",
    "CONSUME_FROM_MAX_OFFSET": "LAST_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET": "FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP": "TIMESTAMP",
}


# ---- the JSON bodies (unknown keys are ignored) ----


class _Subscription(msgspec.Struct):
    topic: str
    subString: str = "*"  # noqa: N815 (RocketMQ's key)
    expressionType: str = "TAG"  # noqa: N815


class _Consumer(msgspec.Struct):
    groupName: str  # noqa: N815
    consumeType: int | str = "CONSUME_PASSIVELY"  # noqa: N815
    messageModel: int | str = "CLUSTERING"  # noqa: N815
    consumeFromWhere: int | str = "CONSUME_FROM_LAST_OFFSET"  # noqa: N815
    subscriptionDataSet: list[_Subscription] = []  # noqa: N815


class _Producer(msgspec.Struct):
    groupName: str  # noqa: N815


class _Heartbeat(msgspec.Struct):
    clientID: str  # noqa: N815
    producerDataSet: list[_Producer] = []  # noqa: N815
    consumerDataSet: list[_Consumer] = []  # noqa: N815


class _Queue(msgspec.Struct):
    topic: str
    queueId: int  # noqa: N815
    brokerName: str = ""  # noqa: N815


class _QueueSet(msgspec.Struct):
    consumerGroup: str  # noqa: N815
    clientId: str  # noqa: N815
    mqSet: list[_Queue] = []  # noqa: N815


def _body(cmd: RemotingCommand, shape: type[Any]) -> Any:
    try:
        return msgspec.json.decode(cmd.body, type=shape)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise InvalidParameterError(f"request code {cmd.code}: bad body: {exc}") from None


def _enum(value: int | str, names: dict[str, str], numbers: tuple[str, ...], what: str) -> str:
    if isinstance(value, int):
        if 0 <= value < len(numbers):
            return numbers[value]
    elif value in names:
        return names[value]
    raise InvalidParameterError(f"heartbeat: unknown {what} {value!r}")


# ---- the clients of each connection ----


class DoorClients:
    """Which connection each client's latest heartbeat came on: a client that moved to a new
    connection is not unregistered when its old one closes."""

    def __init__(self) -> None:
        self._conn_of: dict[str, int] = {}

    def seen(self, client_id: str, conn: Connection) -> None:
        self._conn_of[client_id] = conn.id
        conn.state.setdefault(CLIENT_IDS, set()).add(client_id)

    def connection(self, door: RemotingDoor, client_id: str) -> Connection | None:
        """The open connection the client's latest heartbeat came on, if any."""
        conn_id = self._conn_of.get(client_id)
        conn = door.tcp.open.get(conn_id) if conn_id is not None else None
        return conn if conn is not None and not conn.closed else None

    def closed(self, door: RemotingDoor, conn: Connection) -> None:
        """Unregisters the clients whose latest heartbeat came on conn, through the same
        handler as an UNREGISTER_CLIENT (their groups are told, their locks released)."""
        for client_id in sorted(conn.state.pop(CLIENT_IDS, ())):
            if self._conn_of.get(client_id) != conn.id:
                continue
            del self._conn_of[client_id]
            unasked = RemotingCommand(code=RequestCode.UNREGISTER_CLIENT, flag=ONEWAY_FLAG)
            call = DoorCall(door, conn, unasked)
            door.service.serve(UnregisterClientRequest(client_id=client_id), call)


# ---- the routes ----


def _heartbeat(clients: DoorClients) -> Any:
    def request(cmd: RemotingCommand, call: DoorCall) -> HeartbeatRequest:
        beat: _Heartbeat = _body(cmd, _Heartbeat)
        consumers = []
        subscriptions: dict[tuple[str, str], tuple[str, str]] = {}
        for c in beat.consumerDataSet:
            subs = [
                SubscriptionData(s.topic, s.subString or "*", (s.expressionType or "TAG").upper())
                for s in c.subscriptionDataSet
            ]
            for sub in subs:
                subscriptions[(c.groupName, sub.topic)] = (sub.expression, sub.expression_type)
            consumers.append(
                ConsumerData(
                    group=c.groupName,
                    consume_type=_enum(
                        c.consumeType, _CONSUME_TYPES, _CONSUME_TYPE_NUMBERS, "consumeType"
                    ),
                    message_model=_enum(c.messageModel, _MODELS, _MODEL_NUMBERS, "messageModel"),
                    consume_from=_enum(
                        c.consumeFromWhere, _FROM, _FROM_NUMBERS, "consumeFromWhere"
                    ),
                    subscriptions=subs,
                )
            )
        req = HeartbeatRequest(
            client_id=beat.clientID,
            producer_groups=[p.groupName for p in beat.producerDataSet],
            consumers=consumers,
            client_addr=call.conn.peer,
            language=cmd.language.name,
            version=str(cmd.version),
        )
        clients.seen(beat.clientID, call.conn)
        call.conn.state[notices.LANGUAGE] = cmd.language  # how notices are shaped for it
        call.conn.state.setdefault(pull_route.SUBSCRIPTIONS, {}).update(subscriptions)
        return req

    return request


def _unregister(cmd: RemotingCommand, _call: DoorCall) -> UnregisterClientRequest:
    return UnregisterClientRequest(
        client_id=ext(cmd, "clientID"),
        producer_group=cmd.ext_fields.get("producerGroup", ""),
        consumer_group=cmd.ext_fields.get("consumerGroup", ""),
    )


def _consumer_list(cmd: RemotingCommand, _call: DoorCall) -> GetConsumerListByGroupRequest:
    return GetConsumerListByGroupRequest(consumer_group=ext(cmd, "consumerGroup"))


def _consumer_ids(cmd: RemotingCommand, reply: ConsumerListReply, _p: list[Any]) -> RemotingCommand:
    return ok(cmd, {"consumerIdList": reply.client_ids})


def _send_back(cmd: RemotingCommand, _call: DoorCall) -> ConsumerSendMsgBackRequest:
    # the C++ client sends group, offset and delayLevel only; no maxReconsumeTimes: -1 lets
    # the group's retryMaxTimes decide
    return ConsumerSendMsgBackRequest(
        consumer_group=ext(cmd, "group"),
        phys_offset=ext_int(cmd, "offset"),
        origin_msg_id=cmd.ext_fields.get("originMsgId", ""),
        origin_topic=cmd.ext_fields.get("originTopic", ""),
        delay_level=ext_int(cmd, "delayLevel", 0),
        max_reconsume_times=ext_int(cmd, "maxReconsumeTimes", -1),
    )


def _lock(cmd: RemotingCommand, _call: DoorCall) -> LockBatchRequest:
    body: _QueueSet = _body(cmd, _QueueSet)
    return LockBatchRequest(
        consumer_group=body.consumerGroup,
        client_id=body.clientId,
        queues=[OffsetEntry(q.topic, q.queueId, 0) for q in body.mqSet],
    )


def _locked(cmd: RemotingCommand, reply: LockBatchReply, _p: list[Any]) -> RemotingCommand:
    # each queue is named with the brokerName it was asked with (the request's body again)
    asked: _QueueSet = _body(cmd, _QueueSet)
    names = {(q.topic, q.queueId): q.brokerName for q in asked.mqSet}
    locked = [
        {
            "topic": e.topic,
            "brokerName": names.get((e.topic, e.queue_id), ""),
            "queueId": e.queue_id,
        }
        for e in reply.locked
    ]
    return ok(cmd, {"lockOKMQSet": locked})


def _unlock(cmd: RemotingCommand, _call: DoorCall) -> UnlockBatchRequest:
    body: _QueueSet = _body(cmd, _QueueSet)
    return UnlockBatchRequest(
        consumer_group=body.consumerGroup,
        client_id=body.clientId,
        queues=[OffsetEntry(q.topic, q.queueId, 0) for q in body.mqSet],
    )


def _done(cmd: RemotingCommand, _reply: Any, _payload: list[Any]) -> RemotingCommand:
    return ok(cmd)


def routes(processors: BrokerProcessors, clients: DoorClients | None = None) -> dict[int, Route]:
    del processors  # served through the service's handlers (processors.handlers())
    clients = clients or DoorClients()
    table: dict[int, Route] = {
        RequestCode.HEART_BEAT: Route(_heartbeat(clients), _done),
        RequestCode.UNREGISTER_CLIENT: Route(_unregister, _done),
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: Route(_consumer_list, _consumer_ids),
        RequestCode.CONSUMER_SEND_MSG_BACK: Route(_send_back, _done),
        RequestCode.LOCK_BATCH_MQ: Route(_lock, _locked),
        RequestCode.UNLOCK_BATCH_MQ: Route(_unlock, _done),
    }
    table.update(pull_route.routes())
    table.update(offset_routes.routes())
    return table
