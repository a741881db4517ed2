"""The broker-store's requests, internal to a broker group, and its dispatch feed."""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import QueueStat, Reply, Request

# ---- broker-store (internal to a broker group) ----------------------------------------------


class StorePutRequest(Request, frozen=True, tag="store_put"):
    """Payload: one frame of `count` encoded records for (topic, queue_id)."""

    code = RequestCode.STORE_PUT
    topic: str
    queue_id: int
    count: int
    # "ip:port" stamped as each record's STOREHOST (what offset message ids decode to): the
    # remoting endpoint clients use; empty means the store's configured address
    store_host: str = ""


class StorePutReply(Reply, frozen=True, tag="store_put_reply"):
    status: int  # SendStatus
    queue_offset: int
    phys_offsets: list[int]
    # the log end after this put: a SYNC_MASTER send waits until a slave acked it
    next_offset: int = 0


class StoreGetRequest(Request, frozen=True, tag="store_get"):
    code = RequestCode.STORE_GET
    topic: str
    queue_id: int
    queue_offset: int
    max_msgs: int = 32
    max_bytes: int = 4 * 1024 * 1024
    # tag hash codes to keep; empty keeps everything
    tag_codes: list[int] = []
    # an SQL92 filter over each record's properties (ferry.protocol.sql_filter); "" for none
    sql: str = ""
    suspend_ms: int = 0
    # FOUND answers with the records' log ranges (runs), not the records: the asker reads
    # the CommitLog files itself (remoting on the store's machine)
    ranges: bool = False


class StoreGetReply(Reply, frozen=True, tag="store_get_reply"):
    """Payload (status FOUND): one frame of `count` stored records, or none when the request
    asked for `ranges`: then runs holds their [start, stop) log ranges, in order."""

    status: int  # PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    count: int = 0
    runs: list[tuple[int, int]] = []


class StoreQueueOffsetsRequest(Request, frozen=True, tag="store_queue_offsets"):
    code = RequestCode.STORE_QUEUE_OFFSETS
    topic: str
    queue_ids: list[int]


class StoreQueueOffsetsReply(Reply, frozen=True, tag="store_queue_offsets_reply"):
    queues: list[QueueStat]


class StoreReadLogRequest(Request, frozen=True, tag="store_read_log"):
    """Raw CommitLog bytes from `from_offset`: the catch-up path of every dispatch subscriber."""

    code = RequestCode.STORE_READ_LOG
    from_offset: int
    max_bytes: int = 1024 * 1024


class StoreReadLogReply(Reply, frozen=True, tag="store_read_log_reply"):
    """Payload: one frame of whole records starting at `from_offset` (blank records skipped)."""

    from_offset: int
    next_offset: int  # where the next read starts; == max_offset when caught up
    min_offset: int
    max_offset: int
    # where the log ended after this store process's start-up recovery: records a subscriber
    # applied past it before the restart were lost (a torn tail); it drops them, reads again
    recovered_offset: int = 0


class StoreStatusRequest(Request, frozen=True, tag="store_status"):
    code = RequestCode.STORE_STATUS
    # also answer held_queues (a newly elected master's remoting asks, once)
    held_queues: bool = False


class StoreStatusReply(Reply, frozen=True, tag="store_status_reply"):
    min_offset: int
    max_offset: int
    flushed_offset: int
    topics: int
    queues: int
    recovered_offset: int = 0  # as in StoreReadLogReply
    log_syncs: int = 0  # flushes of the CommitLog since start (group commits share one)
    disk_full: bool = False  # above diskSpaceWarningLevelRatio: puts are refused
    # the file system holding the store: used ratio as the disk guard measures it (0..1), and
    # its size and the bytes still available (0: not measured)
    disk_used_ratio: float = 0.0
    disk_total_bytes: int = 0
    disk_free_bytes: int = 0
    # when asked: by topic, 1 + the highest queue id whose ConsumeQueue still holds entries
    held_queues: dict[str, int] = {}


class DispatchNotice(msgspec.Struct, frozen=True, tag="dispatch", tag_field="t"):
    """Published on the store's feed after each append; payload: the appended records.

    A hint only: subscribers persist the offset they applied and catch up with
    StoreReadLogRequest whenever `from_offset` is past what they have.
    """

    from_offset: int
    next_offset: int


# ---- administration the store carries out for remoting --------------------------------------


class StoreDeleteTopicRequest(Request, frozen=True, tag="store_delete_topic"):
    code = RequestCode.STORE_DELETE_TOPIC
    topic: str


class StoreUpdateConfigRequest(Request, frozen=True, tag="store_update_config"):
    code = RequestCode.STORE_UPDATE_CONFIG
    properties: dict[str, str]


class StoreConfirmOffsetRequest(Request, frozen=True, tag="store_confirm_offset"):
    """Remoting to its store (allAckInSyncStateSet): every replica of the in-sync set holds
    the log up to `offset`; queue reads may go that far."""

    code = RequestCode.STORE_CONFIRM_OFFSET
    offset: int


# this role's requests and replies: AnyRequest and AnyReply (the package) join them
StoreRequest: TypeAlias = (
    StorePutRequest
    | StoreGetRequest
    | StoreQueueOffsetsRequest
    | StoreReadLogRequest
    | StoreStatusRequest
    | StoreDeleteTopicRequest
    | StoreUpdateConfigRequest
    | StoreConfirmOffsetRequest
)

StoreReply: TypeAlias = (
    StorePutReply | StoreGetReply | StoreQueueOffsetsReply | StoreReadLogReply | StoreStatusReply
)
