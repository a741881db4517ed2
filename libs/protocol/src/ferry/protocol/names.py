"""Topic and group name rules (RocketMQ's TopicValidator)."""

from __future__ import annotations

import re

from ferry.protocol.errors import InvalidParameterError

MAX_TOPIC_LENGTH = 127
MAX_GROUP_LENGTH = 255
_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")

AUTO_CREATE_TOPIC_KEY = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"


def check_topic(topic: str) -> None:
    if not topic:
        raise InvalidParameterError("topic is empty")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidParameterError(f"topic is longer than {MAX_TOPIC_LENGTH} characters")
    if not _VALID.match(topic):
        raise InvalidParameterError(f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]")


def check_group(group: str) -> None:
    if not group:
        raise InvalidParameterError("group is empty")
    if len(group) > MAX_GROUP_LENGTH:
        raise InvalidParameterError(f"group is longer than {MAX_GROUP_LENGTH} characters")
    if not _VALID.match(group):
        raise InvalidParameterError(f"group {group!r} has characters outside [%|a-zA-Z0-9_-]")


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def is_system_topic(topic: str) -> bool:
    return topic in (AUTO_CREATE_TOPIC_KEY, SCHEDULE_TOPIC) or topic.startswith(SYSTEM_TOPIC_PREFIX)
