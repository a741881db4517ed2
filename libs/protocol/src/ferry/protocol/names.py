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
# timer messages (RocketMQ 5) wait here until the scheduler takes them into its timer files
TIMER_TOPIC = "rmq_sys_wheel_timer"
# transaction messages: half messages wait here, decisions ("op" records) go there, and half
# messages checked too often without an answer end in the third
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRANSACTION_TOPICS = frozenset({TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC})
# an op record's TRAN_END property says how its half message ended (COMMIT, ROLLBACK); a
# COMMITTING op is the mark remoting stores before a commit's copy, so that the scheduler knows
# where in the log to look for that copy if the final op record never came
TRAN_END_PROPERTY = "TRAN_END"
TRAN_END_COMMITTING = "COMMITTING"


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


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def revive_topic(cluster: str) -> str:
    """Pop consumption's checkpoints and acks (one queue), as RocketMQ's REVIVE_LOG topic."""
    return f"{SYSTEM_TOPIC_PREFIX}REVIVE_LOG_{cluster}"


def is_system_topic(topic: str) -> bool:
    return (
        topic in (AUTO_CREATE_TOPIC_KEY, SCHEDULE_TOPIC)
        or topic in TRANSACTION_TOPICS
        or topic.startswith(SYSTEM_TOPIC_PREFIX)
    )
