"""Request/reply (RocketMQ's request() and RequestCallback): the replies' two requests, and the
message properties both ends read.

A request is an ordinary send flagged `request_reply`: the broker it goes through stamps its
cluster (CLUSTER) and its own address (REPLY_TO_BROKER) on the record. The replier sends its
reply to that broker (SendReplyRequest, topic `<cluster>_REPLY_TOPIC`); the broker hands it to
the requester's held PollRepliesRequest, or keeps it for the requester's next poll until the
request's TTL has passed, and stores a copy in the reply topic.
"""

from __future__ import annotations

from typing import TypeAlias

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import Reply, Request

# RocketMQ's MessageConst names
PROPERTY_CORRELATION_ID = "CORRELATION_ID"
PROPERTY_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
PROPERTY_MESSAGE_TTL = "TTL"  # ms the requester waits for its reply
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_MESSAGE_TYPE = "MSG_TYPE"
REPLY_MESSAGE_FLAG = "reply"  # MSG_TYPE of a reply
# Ferry-only: "host:port" of the broker that took the request, where its reply must go
PROPERTY_REPLY_TO_BROKER = "REPLY_TO_BROKER"
REPLY_TOPIC_SUFFIX = "REPLY_TOPIC"


def reply_topic(cluster: str) -> str:
    """The cluster's reply topic, which every broker of the cluster creates at start."""
    return f"{cluster}_{REPLY_TOPIC_SUFFIX}"


class SendReplyRequest(Request, frozen=True, tag="reply_send"):
    """Payload: one frame with one encoded record of `topic` (the cluster's reply topic).
    `reply_to` and `correlation_id` repeat the record's REPLY_TO_CLIENT and CORRELATION_ID,
    so the broker routes the reply without decoding it; ttl_ms is how long it may keep a reply
    its requester has not polled for yet."""

    code = RequestCode.SEND_REPLY_MESSAGE
    producer_group: str
    topic: str
    reply_to: str
    correlation_id: str
    ttl_ms: int = 3000


class PollRepliesRequest(Request, frozen=True, tag="reply_poll"):
    """The replies waiting for `reply_to` (a requester's REPLY_TO_CLIENT); held up to hold_ms
    when there are none yet."""

    code = RequestCode.POLL_REPLIES
    reply_to: str
    hold_ms: int = 0


class PollRepliesReply(Reply, frozen=True, tag="reply_poll_reply"):
    """Payload: one frame with `count` reply records as their repliers sent them (the store
    timestamp and host filled in), none when count is 0."""

    count: int = 0
    broker_name: str = ""


ReplyRequest: TypeAlias = SendReplyRequest | PollRepliesRequest
ReplyReply: TypeAlias = PollRepliesReply

__all__ = [
    "PollRepliesReply",
    "PollRepliesRequest",
    "SendReplyRequest",
]
