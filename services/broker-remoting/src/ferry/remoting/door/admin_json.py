"""The JSON bodies of the door's admin codes, in the shapes RocketMQ's Java tools (mqadmin,
rocketmq-dashboard) decode with fastjson.

A map keyed by MessageQueue (TopicStatsTable, ConsumeStats) is written as fastjson writes it:
each key is the queue's JSON object itself, not a string. That is not strict JSON, but it is
what the Java side parses (and all it parses); table_with_queue_keys() builds such a map.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ferry.protocol.messages import ClientConnection, SubscriptionData, TopicConfig
from ferry.protocol.messages.admin import SubscriptionGroupConfig
from ferry.protocol.rocketmq.codes import LanguageCode
from ferry.protocol.rocketmq.fields import json_body

_LANGUAGES = frozenset(c.name for c in LanguageCode)
# Ferry's names -> RocketMQ's enum names (ConsumeType, ConsumeFromWhere)
CONSUME_TYPES = {"PULL": "CONSUME_ACTIVELY", "PUSH": "CONSUME_PASSIVELY", "POP": "CONSUME_POP"}
CONSUME_FROM = {
    "LAST_OFFSET": "CONSUME_FROM_LAST_OFFSET",
    "FIRST_OFFSET": "CONSUME_FROM_FIRST_OFFSET",
    "TIMESTAMP": "CONSUME_FROM_TIMESTAMP",
}


def data_version() -> dict[str, Any]:
    """A DataVersion: Ferry keeps no version counter of its tables; the tools only show it."""
    return {"stateVersion": 0, "timestamp": int(time.time() * 1000), "counter": 0}


def topic_config_json(c: TopicConfig) -> dict[str, Any]:
    return {
        "topicName": c.topic_name,
        "readQueueNums": c.read_queue_nums,
        "writeQueueNums": c.write_queue_nums,
        "perm": c.perm,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": c.order,
        "attributes": {},
    }


def group_config_json(g: SubscriptionGroupConfig) -> dict[str, Any]:
    return {
        "groupName": g.group_name,
        "consumeEnable": g.consume_enable,
        "consumeFromMinEnable": g.consume_from_min_enable,
        "consumeBroadcastEnable": g.consume_broadcast_enable,
        "consumeMessageOrderly": g.consume_message_orderly,
        "retryQueueNums": g.retry_queue_nums,
        "retryMaxTimes": g.retry_max_times,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": g.notify_consumer_ids_changed_enable,
        "groupSysFlag": 0,
        "consumeTimeoutMinute": 15,
        "subscriptionDataSet": [],
        "attributes": {},
    }


_GROUP_FIELDS = {
    "consumeEnable": ("consume_enable", bool),
    "consumeFromMinEnable": ("consume_from_min_enable", bool),
    "consumeBroadcastEnable": ("consume_broadcast_enable", bool),
    "consumeMessageOrderly": ("consume_message_orderly", bool),
    "retryQueueNums": ("retry_queue_nums", int),
    "retryMaxTimes": ("retry_max_times", int),
    "notifyConsumerIdsChangedEnable": ("notify_consumer_ids_changed_enable", bool),
}


def group_config_from(data: Any) -> SubscriptionGroupConfig:
    """A SubscriptionGroupConfig body; the fields Ferry has no use for are ignored."""
    if not isinstance(data, dict) or not isinstance(data.get("groupName"), str):
        raise ValueError("the body is no SubscriptionGroupConfig with a groupName")
    fields: dict[str, Any] = {}
    for key, (name, kind) in _GROUP_FIELDS.items():
        if key not in data:
            continue
        value = data[key]
        # bool is an int in Python: a count must not be true or false
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{key} must be a JSON {'boolean' if kind is bool else 'number'}")
        fields[name] = value
    return SubscriptionGroupConfig(group_name=data["groupName"], **fields)


def connection_json(c: ClientConnection) -> dict[str, Any]:
    language = c.language.upper()
    return {
        "clientId": c.client_id,
        "clientAddr": c.client_addr,
        "language": language if language in _LANGUAGES else "OTHER",
        # an int on RocketMQ's side (its MQVersion ordinal); Ferry's SDK sends a version text
        "version": int(c.version) if c.version.isdigit() else 0,
    }


def java_hash(text: str) -> int:
    """String.hashCode(), which RocketMQ's SubscriptionData keeps in codeSet per tag."""
    units = text.encode("utf-16-be")  # Java hashes UTF-16 code units
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def subscription_json(s: SubscriptionData) -> dict[str, Any]:
    tags: list[str] = []
    if s.expression_type.upper() == "TAG" and s.expression.strip() not in ("", "*"):
        tags = [t.strip() for t in s.expression.split("||") if t.strip()]
    return {
        "classFilterMode": False,
        "topic": s.topic,
        "subString": s.expression,
        "tagsSet": tags,
        "codeSet": [java_hash(t) for t in tags],
        "subVersion": 0,
        "expressionType": s.expression_type.upper(),
    }


def queue_key(topic: str, broker_name: str, queue_id: int) -> dict[str, Any]:
    # fastjson writes a bean's fields in name order
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


def table_with_queue_keys(entries: Iterable[tuple[dict[str, Any], Any]]) -> bytes:
    """A JSON object whose keys are MessageQueue objects, as fastjson writes Map<MQ, V>."""
    parts = [json_body(key) + b":" + json_body(value) for key, value in entries]
    return b"{" + b",".join(parts) + b"}"


def properties_text(config: dict[str, str]) -> bytes:
    """java.util.Properties text, as RocketMQ sends its config."""
    return "".join(f"{k}={v}\n" for k, v in sorted(config.items())).encode()


def parse_properties(body: bytes) -> dict[str, str]:
    props: dict[str, str] = {}
    for raw in body.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"not a key=value line: {line!r}")
        props[key.strip()] = value.strip()
    return props
