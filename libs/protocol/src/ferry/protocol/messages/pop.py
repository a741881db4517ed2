"""Pop consumption (RocketMQ 5's stateless consumers): pop, ack, change of invisible time,
and what remoting and the scheduler's revive service tell each other.

A pop hands out messages that stay invisible to the group for `invisible_ms`; each carries a
receipt handle, which an ack or a change of invisible time sends back. The broker's record of
what is in flight is a checkpoint (PopCheckpoint) stored in the revive topic of the CommitLog,
next to the acks that settle it (ReviveAck): both are bodies of records there, encoded as
msgpack of ReviveRecord, so they are durable and replicated as any message is.
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import Reply, Request

# PopMessageRequest.init_mode: where a group with no offset for a queue starts
POP_INIT_BY_FLAG = ""  # at the queue's first message with from_first, else at its end
POP_INIT_FRESH = "fresh"  # at its end, unless the queue is fresh: then at 0 (remoting/pop.py)


class PopMessageRequest(Request, frozen=True, tag="pop"):
    """Up to max_msgs messages of `topic` (or of the group's %RETRY% topic) for the group,
    invisible to it for invisible_ms; waits up to poll_ms for some when none is there.
    A group with no offset for a queue starts where init_mode says."""

    code = RequestCode.POP_MESSAGE
    consumer_group: str
    topic: str
    expression: str = "*"
    max_msgs: int = 32
    invisible_ms: int = 60_000
    poll_ms: int = 0
    from_first: bool = False
    max_reconsume_times: int = -1  # -1: the group's retryMaxTimes
    client_id: str = ""
    expression_type: str = ""  # "" or TAG: tags; SQL92: a filter (enablePropertyFilter)
    init_mode: str = POP_INIT_BY_FLAG  # POP_INIT_BY_FLAG or POP_INIT_FRESH
    # a FIFO group's pop: one batch of a queue in flight at a time, in order (pop_order.py)
    order: bool = False


class PopMessageReply(Reply, frozen=True, tag="pop_reply"):
    """Payload: one frame with `count` stored records, as a pull's; handles[i] is the receipt
    handle of the i-th record."""

    status: int  # PullStatus: FOUND or NO_NEW_MSG
    count: int = 0
    handles: list[str] = []


class AckMessageRequest(Request, frozen=True, tag="pop_ack"):
    code = RequestCode.ACK_MESSAGE
    consumer_group: str
    topic: str  # the topic the message was received from (its original one for a retry)
    receipt_handle: str


class AckEntry(msgspec.Struct, frozen=True, array_like=True):
    topic: str
    receipt_handle: str


class BatchAckMessageRequest(Request, frozen=True, tag="pop_batch_ack"):
    """Acks of many messages of the group in one request (and one revive log write)."""

    code = RequestCode.BATCH_ACK_MESSAGE
    consumer_group: str
    entries: list[AckEntry]


class BatchAckMessageReply(Reply, frozen=True, tag="pop_batch_ack_reply"):
    """codes[i]: 0 when entries[i] is acked, else the error code (INVALID_RECEIPT_HANDLE);
    messages[i] says why ("" when acked)."""

    codes: list[int]
    messages: list[str]


class ChangeInvisibleTimeRequest(Request, frozen=True, tag="pop_change_invisible"):
    """The message stays invisible for invisible_ms from now; the reply's handle replaces the
    one sent (which no longer acks)."""

    code = RequestCode.CHANGE_MESSAGE_INVISIBLETIME
    consumer_group: str
    topic: str
    receipt_handle: str
    invisible_ms: int


class ChangeInvisibleTimeReply(Reply, frozen=True, tag="pop_change_invisible_reply"):
    receipt_handle: str


# ---- remoting and the revive service (scheduler) -------------------------------------------


class PopCheckpoint(msgspec.Struct, frozen=True, tag="ck", omit_defaults=True):
    """Messages handed out by one pop from one queue. `topic` is the topic popped for (the
    one acks name); `queue_topic` the one read (it, or the group's %RETRY% topic)."""

    group: str
    topic: str
    queue_topic: str
    queue_id: int
    pop_ms: int
    revive_at_ms: int  # when the un-acked ones come back
    max_reconsume_times: int
    queue_offsets: list[int]
    phys_offsets: list[int]


class ReviveAck(msgspec.Struct, frozen=True, tag="ack", omit_defaults=True):
    """Message `index` of the checkpoint stored at revive queue offset `ck` is settled:
    acked, its invisible time changed (a new checkpoint holds it), or revived."""

    ck: int
    index: int
    revived: bool = False


class ReviveAcks(msgspec.Struct, frozen=True, tag="acks", omit_defaults=True):
    """Several ReviveAcks stored together (the acks of one turn of the revive service):
    (ck, index) pairs acked (or changed), and revived."""

    acked: list[tuple[int, int]] = []
    revived: list[tuple[int, int]] = []


ReviveRecord: TypeAlias = PopCheckpoint | ReviveAck | ReviveAcks


class PopCheckpointRequest(Request, frozen=True, tag="pop_checkpoint"):
    code = RequestCode.POP_CHECKPOINT
    checkpoint: PopCheckpoint


class PopCheckpointReply(Reply, frozen=True, tag="pop_checkpoint_reply"):
    ck: int  # revive queue offset of the stored checkpoint
    handles: list[str]


PopRequest: TypeAlias = (
    PopMessageRequest
    | AckMessageRequest
    | BatchAckMessageRequest
    | ChangeInvisibleTimeRequest
    | PopCheckpointRequest
)
PopReply: TypeAlias = (
    PopMessageReply | BatchAckMessageReply | ChangeInvisibleTimeReply | PopCheckpointReply
)

__all__ = [
    "POP_INIT_BY_FLAG",
    "POP_INIT_FRESH",
    "AckEntry",
    "AckMessageRequest",
    "BatchAckMessageReply",
    "BatchAckMessageRequest",
    "ChangeInvisibleTimeReply",
    "ChangeInvisibleTimeRequest",
    "PopCheckpoint",
    "PopCheckpointReply",
    "PopCheckpointRequest",
    "PopMessageReply",
    "PopMessageRequest",
    "ReviveAck",
    "ReviveAcks",
    "ReviveRecord",
]
