"""The door's PULL_MESSAGE (11): a RocketMQ consumer's pull, served by the PullProcessor.

sysFlag bits: 1 commits the offset in commitOffset, 2 lets the broker hold the pull up to
suspendTimeoutMillis (long polling, in the store), 4 says the pull carries its subscription.
A pull without one (Java's push consumer by default) filters by the subscription its client's
heartbeat registered on this connection, or takes everything.

The response's code is the pull status (SUCCESS, PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY,
PULL_OFFSET_MOVED), its ext fields the queue's offsets as strings, and its body the stored
records as the store handed them over: the CommitLog layout RocketMQ clients decode.
"""

from __future__ import annotations

from typing import Any

from ferry.protocol.codes import PullStatus
from ferry.protocol.messages import PullMessageReply, PullMessageRequest
from ferry.protocol.rocketmq.codes import RequestCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.protocol.rocketmq.fields import ext, ext_int, ext_int32
from ferry.runtime.remoting_door import DoorCall, Route

COMMIT_OFFSET_FLAG = 0x1
SUSPEND_FLAG = 0x2
SUBSCRIPTION_FLAG = 0x4
DEFAULT_MAX_MSGS = 32
DEFAULT_MAX_BYTES = 4 * 1024 * 1024

# conn.state key: (group, topic) -> (expression, expression type), from the heartbeats
SUBSCRIPTIONS = "subscriptions"


def pull_request(cmd: RemotingCommand, call: DoorCall) -> PullMessageRequest:
    group = ext(cmd, "consumerGroup")
    topic = ext(cmd, "topic")
    sys_flag = ext_int32(cmd, "sysFlag", 0)
    if sys_flag & SUBSCRIPTION_FLAG:
        expression = cmd.ext_fields.get("subscription") or "*"
        expression_type = cmd.ext_fields.get("expressionType") or "TAG"
    else:
        registered: dict[tuple[str, str], tuple[str, str]] = call.conn.state.get(SUBSCRIPTIONS, {})
        expression, expression_type = registered.get((group, topic), ("*", "TAG"))
    return PullMessageRequest(
        consumer_group=group,
        topic=topic,
        queue_id=ext_int32(cmd, "queueId"),
        queue_offset=ext_int(cmd, "queueOffset"),
        max_msgs=ext_int32(cmd, "maxMsgNums", DEFAULT_MAX_MSGS),
        max_bytes=ext_int32(cmd, "maxMsgBytes", DEFAULT_MAX_BYTES),
        suspend_ms=ext_int(cmd, "suspendTimeoutMillis", 0) if sys_flag & SUSPEND_FLAG else 0,
        expression=expression,
        commit_offset=ext_int(cmd, "commitOffset", 0) if sys_flag & COMMIT_OFFSET_FLAG else -1,
        expression_type=expression_type.upper(),
    )


def pull_response(
    cmd: RemotingCommand, reply: PullMessageReply, payload: list[Any]
) -> RemotingCommand:
    fields = {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": str(reply.next_begin_offset),
        "minOffset": str(reply.min_offset),
        "maxOffset": str(reply.max_offset),
    }
    body = b""
    if reply.status == PullStatus.FOUND and payload:
        # the records frame as it came, one copy into the response at most
        body = (
            payload[0] if len(payload) == 1 and isinstance(payload[0], bytes) else b"".join(payload)
        )
    return cmd.response(int(reply.status), ext_fields=fields, body=body)


def routes() -> dict[int, Route]:
    return {RequestCode.PULL_MESSAGE: Route(pull_request, pull_response)}
