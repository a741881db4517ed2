"""The door's admin routes (see door/__init__.py): what mqadmin and rocketmq-dashboard ask a
broker, mapped onto the processors' own admin requests (AdminProcessor, MetadataAdmin,
LiveConfig), with RocketMQ's bodies (admin_json.py) in the responses.

- topics: UPDATE_AND_CREATE_TOPIC (17; the header's topic, readQueueNums, writeQueueNums,
  perm, order), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21; a
  TopicConfigSerializeWrapper), GET_TOPIC_STATS_INFO (202; a TopicStatsTable);
- groups: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200; a SubscriptionGroupConfig body),
  DELETE_SUBSCRIPTIONGROUP (207; groupName, cleanOffset), GET_ALL_SUBSCRIPTIONGROUP_CONFIG
  (201; a SubscriptionGroupWrapper);
- the broker: GET_BROKER_RUNTIME_INFO (28; a KVTable), GET_BROKER_CONFIG (26; Properties
  text, the ext field `version`), UPDATE_BROKER_CONFIG (25; Properties text);
- admin_queries.py: connections, consume stats, who consumes a topic, message queries.

GET_EARLIEST_MSG_STORETIME (32) is not served: no processor answers a queue's first store time.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ferry.protocol.messages import (
    BrokerConfigReply,
    BrokerRuntimeInfoReply,
    DeleteSubscriptionGroupRequest,
    DeleteTopicRequest,
    GetAllSubscriptionGroupRequest,
    GetAllTopicConfigRequest,
    GetBrokerConfigRequest,
    GetBrokerRuntimeInfoRequest,
    GetTopicStatsRequest,
    SubscriptionGroupListReply,
    TopicConfig,
    TopicConfigListReply,
    TopicStatsReply,
    UpdateBrokerConfigRequest,
    UpdateSubscriptionGroupRequest,
    UpdateTopicRequest,
)
from ferry.protocol.rocketmq.codes import RequestCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.protocol.rocketmq.fields import SUCCESS, ext, ext_bool, ext_int, json_body, ok
from ferry.remoting.calls import Handler
from ferry.remoting.door import admin_json as shapes
from ferry.remoting.door import admin_queries, reset_offset
from ferry.remoting.door.asks import Asks
from ferry.remoting.processors import BrokerProcessors
from ferry.runtime.remoting_door import DoorCall, Route

_JSON = msgspec.json.Decoder()

# runtime info keys RocketMQ's tools read, from the Ferry key holding the same count
_RUNTIME_ALIASES = {
    "msgPutTotalTodayNow": "putMessageTotal",
    "msgGetTotalTodayNow": "getMessageTotal",
    "brokerVersionDesc": "brokerVersion",
}


def _done(cmd: RemotingCommand, _reply: Any, _payload: list[Any]) -> RemotingCommand:
    return cmd.response(SUCCESS)


# ---- topics ----


def _update_topic(cmd: RemotingCommand, _call: DoorCall) -> UpdateTopicRequest:
    config = TopicConfig(
        topic_name=ext(cmd, "topic"),
        read_queue_nums=ext_int(cmd, "readQueueNums"),
        write_queue_nums=ext_int(cmd, "writeQueueNums"),
        perm=ext_int(cmd, "perm"),
        order=ext_bool(cmd, "order"),
    )
    return UpdateTopicRequest(config=config)


def _all_topics(cmd: RemotingCommand, reply: TopicConfigListReply, _p: Any) -> RemotingCommand:
    table = {c.topic_name: shapes.topic_config_json(c) for c in reply.topics}
    return ok(cmd, {"topicConfigTable": table, "dataVersion": shapes.data_version()})


def _topic_stats(broker_name: str) -> Route:
    def request(cmd: RemotingCommand, _call: DoorCall) -> GetTopicStatsRequest:
        return GetTopicStatsRequest(topic=ext(cmd, "topic"))

    def response(cmd: RemotingCommand, reply: TopicStatsReply, _p: Any) -> RemotingCommand:
        topic = ext(cmd, "topic")
        table = shapes.table_with_queue_keys(
            (
                shapes.queue_key(topic, broker_name, q.queue_id),
                {
                    "minOffset": max(0, q.min_offset),
                    "maxOffset": max(0, q.max_offset),
                    "lastUpdateTimestamp": q.last_store_ms,
                },
            )
            for q in reply.queues
        )
        body = b'{"offsetTable":' + table + b',"topicPutTps":0.0}'
        return cmd.response(SUCCESS, body=body)

    return Route(request, response)


# ---- subscription groups ----


def _update_group(cmd: RemotingCommand, _call: DoorCall) -> UpdateSubscriptionGroupRequest:
    try:
        data = _JSON.decode(cmd.body)
    except msgspec.DecodeError as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None
    return UpdateSubscriptionGroupRequest(config=shapes.group_config_from(data))


def _delete_group(cmd: RemotingCommand, _call: DoorCall) -> DeleteSubscriptionGroupRequest:
    return DeleteSubscriptionGroupRequest(
        group_name=ext(cmd, "groupName"), clean_offset=ext_bool(cmd, "cleanOffset")
    )


def _all_groups(
    cmd: RemotingCommand, reply: SubscriptionGroupListReply, _p: Any
) -> RemotingCommand:
    table = {g.group_name: shapes.group_config_json(g) for g in reply.groups}
    return ok(
        cmd,
        {
            "subscriptionGroupTable": table,
            "forbiddenTable": {},
            "dataVersion": shapes.data_version(),
        },
    )


# ---- the broker ----


def _runtime_info(cmd: RemotingCommand, reply: BrokerRuntimeInfoReply, _p: Any) -> RemotingCommand:
    table = dict(reply.info)
    for alias, key in _RUNTIME_ALIASES.items():
        if key in table:
            table.setdefault(alias, table[key])
    return ok(cmd, {"table": table})


def _broker_config(cmd: RemotingCommand, reply: BrokerConfigReply, _p: Any) -> RemotingCommand:
    version = json_body(shapes.data_version()).decode()
    return cmd.response(
        SUCCESS, ext_fields={"version": version}, body=shapes.properties_text(reply.config)
    )


def _update_config(cmd: RemotingCommand, _call: DoorCall) -> UpdateBrokerConfigRequest:
    return UpdateBrokerConfigRequest(properties=shapes.parse_properties(cmd.body))


def broker_name_of(handlers: dict[type, Handler]) -> str:
    """The broker's name (what MessageQueue keys carry), as its config in force has it."""
    reply = handlers[GetBrokerConfigRequest](GetBrokerConfigRequest(), None)
    return reply.config.get("brokerName", "") if isinstance(reply, BrokerConfigReply) else ""


def routes(processors: BrokerProcessors) -> dict[int, Route]:
    handlers = processors.handlers()
    name = broker_name_of(handlers)
    table: dict[int, Route] = {
        RequestCode.UPDATE_AND_CREATE_TOPIC: Route(_update_topic, _done),
        RequestCode.DELETE_TOPIC_IN_BROKER: Route(
            lambda c, _call: DeleteTopicRequest(topic=ext(c, "topic")), _done
        ),
        RequestCode.GET_ALL_TOPIC_CONFIG: Route(
            lambda _c, _call: GetAllTopicConfigRequest(), _all_topics
        ),
        RequestCode.GET_TOPIC_STATS_INFO: _topic_stats(name),
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: Route(_update_group, _done),
        RequestCode.DELETE_SUBSCRIPTIONGROUP: Route(_delete_group, _done),
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: Route(
            lambda _c, _call: GetAllSubscriptionGroupRequest(), _all_groups
        ),
        RequestCode.GET_BROKER_RUNTIME_INFO: Route(
            lambda _c, _call: GetBrokerRuntimeInfoRequest(), _runtime_info
        ),
        RequestCode.GET_BROKER_CONFIG: Route(
            lambda _c, _call: GetBrokerConfigRequest(), _broker_config
        ),
        RequestCode.UPDATE_BROKER_CONFIG: Route(_update_config, _done),
    }
    table.update(admin_queries.routes(handlers, name))
    table.update(reset_offset.routes(Asks(handlers), name))
    return table
