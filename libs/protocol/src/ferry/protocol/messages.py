"""Every request and reply on the wire, as frozen tagged msgspec Structs.

Rules that keep old peers working (docs/protocol.md): a new field always has a default; a
field's type never changes; unknown fields are ignored; a tag is never reused.
Each request names its RocketMQ request code in `code` (Ferry-only requests use 10000+).
"""

from __future__ import annotations

from typing import ClassVar, TypeAlias

import msgspec

from ferry.protocol.codes import Perm, RequestCode


class _Wire(msgspec.Struct, frozen=True, tag_field="t", omit_defaults=True):
    pass


class Request(_Wire, frozen=True):
    code: ClassVar[int]


class Reply(_Wire, frozen=True):
    pass


# ---- shared data shapes -------------------------------------------------------------------


class TopicConfig(msgspec.Struct, frozen=True, omit_defaults=True):
    topic_name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = Perm.READ_WRITE
    order: bool = False


class QueueData(msgspec.Struct, frozen=True, omit_defaults=True):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = Perm.READ_WRITE


class BrokerData(msgspec.Struct, frozen=True, omit_defaults=True):
    cluster: str
    broker_name: str
    # broker id (0 master, >0 slaves) -> "host:port" of its remoting endpoint
    broker_addrs: dict[int, str]


class TopicRouteData(msgspec.Struct, frozen=True, omit_defaults=True):
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]


class SubscriptionData(msgspec.Struct, frozen=True, omit_defaults=True):
    topic: str
    expression: str = "*"


class ConsumerData(msgspec.Struct, frozen=True, omit_defaults=True):
    group: str
    consume_type: str = "PULL"  # PULL (lite pull) or PUSH
    message_model: str = "CLUSTERING"
    consume_from: str = "LAST_OFFSET"
    subscriptions: list[SubscriptionData] = []


class OffsetEntry(msgspec.Struct, frozen=True, array_like=True):
    topic: str
    queue_id: int
    offset: int


class QueueStat(msgspec.Struct, frozen=True, array_like=True):
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_ms: int = 0


# ---- generic replies ----------------------------------------------------------------------


class OkReply(Reply, frozen=True, tag="ok"):
    pass


class ErrorReply(Reply, frozen=True, tag="error"):
    code: int
    message: str = ""
    retriable: bool = False


class PingRequest(Request, frozen=True, tag="ping"):
    code = RequestCode.PING


class PongReply(Reply, frozen=True, tag="pong"):
    service: str
    version: str = ""


# ---- name server ----------------------------------------------------------------------------


class RegisterBrokerRequest(Request, frozen=True, tag="register_broker"):
    code = RequestCode.REGISTER_BROKER
    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_addr: str = ""
    topics: dict[str, TopicConfig] = {}
    # how long the name server keeps this broker without a new registration
    timeout_ms: int = 120_000


class RegisterBrokerReply(Reply, frozen=True, tag="register_broker_reply"):
    master_addr: str = ""
    ha_addr: str = ""


class UnregisterBrokerRequest(Request, frozen=True, tag="unregister_broker"):
    code = RequestCode.UNREGISTER_BROKER
    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str


class GetRouteInfoRequest(Request, frozen=True, tag="get_route"):
    code = RequestCode.GET_ROUTEINFO_BY_TOPIC
    topic: str


class RouteInfoReply(Reply, frozen=True, tag="route"):
    route: TopicRouteData


class GetClusterInfoRequest(Request, frozen=True, tag="get_cluster_info"):
    code = RequestCode.GET_BROKER_CLUSTER_INFO


class ClusterInfoReply(Reply, frozen=True, tag="cluster_info"):
    # broker name -> its data; cluster name -> broker names
    brokers: dict[str, BrokerData]
    clusters: dict[str, list[str]]


class GetAllTopicListRequest(Request, frozen=True, tag="get_topic_list"):
    code = RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER


class TopicListReply(Reply, frozen=True, tag="topic_list"):
    topics: list[str]


# ---- broker (client facing) -----------------------------------------------------------------


class SendMessageRequest(Request, frozen=True, tag="send"):
    """Payload: one frame with `count` encoded records (ferry.protocol.record), all of `topic`.

    queue_id -1 lets the broker pick the queue. When the topic does not exist and the broker
    allows auto-creation, it is created from `default_topic` with `default_topic_queue_nums`.
    """

    code = RequestCode.SEND_MESSAGE
    producer_group: str
    topic: str
    queue_id: int
    count: int = 1
    default_topic: str = ""
    default_topic_queue_nums: int = 4
    # delayed sends (count 1, sent alone): stored aside in SCHEDULE_TOPIC_XXXX (delay level) or
    # the timer topic (absolute delivery time, ms) until due; 0 for none
    delay_level: int = 0
    deliver_at_ms: int = 0
    # a transaction's half message (count 1): stored aside in RMQ_SYS_TRANS_HALF_TOPIC, with
    # the topic and queue picked here in its REAL_TOPIC / REAL_QID properties, until it ends
    transactional: bool = False
    # the records' msg ids (UNIQ_KEY) joined by ",", as a producer has them at hand: the
    # broker's send span lists them as they are; "" and the broker finds them in the records
    msg_ids: str = ""


class SendMessageReply(Reply, frozen=True, tag="send_reply"):
    status: int  # SendStatus
    queue_id: int
    queue_offset: int  # offset of the first message of the batch
    store_host: str  # "ip:port" that makes offset message ids
    phys_offsets: list[int]  # CommitLog offset of each message
    broker_name: str = ""


class PullMessageRequest(Request, frozen=True, tag="pull"):
    code = RequestCode.PULL_MESSAGE
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msgs: int = 32
    max_bytes: int = 4 * 1024 * 1024
    suspend_ms: int = 0  # long polling: hold up to this long when nothing is there
    expression: str = "*"  # tags: "*" or "TagA || TagB"
    commit_offset: int = -1  # piggybacked consumer offset commit; -1 for none


class PullMessageReply(Reply, frozen=True, tag="pull_reply"):
    """Payload (status FOUND): one frame of `count` stored records, as they lie in the log."""

    status: int  # PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    count: int = 0


class QueryConsumerOffsetRequest(Request, frozen=True, tag="query_consumer_offset"):
    code = RequestCode.QUERY_CONSUMER_OFFSET
    consumer_group: str
    topic: str
    queue_id: int


class UpdateConsumerOffsetRequest(Request, frozen=True, tag="update_consumer_offset"):
    code = RequestCode.UPDATE_CONSUMER_OFFSET
    consumer_group: str
    entries: list[OffsetEntry]


class GetMaxOffsetRequest(Request, frozen=True, tag="get_max_offset"):
    code = RequestCode.GET_MAX_OFFSET
    topic: str
    queue_id: int


class GetMinOffsetRequest(Request, frozen=True, tag="get_min_offset"):
    code = RequestCode.GET_MIN_OFFSET
    topic: str
    queue_id: int


class OffsetReply(Reply, frozen=True, tag="offset"):
    offset: int


class HeartbeatRequest(Request, frozen=True, tag="heartbeat"):
    code = RequestCode.HEART_BEAT
    client_id: str
    producer_groups: list[str] = []
    consumers: list[ConsumerData] = []
    # what consumerConnection / producerConnection show
    client_addr: str = ""
    language: str = ""
    version: str = ""


class UnregisterClientRequest(Request, frozen=True, tag="unregister_client"):
    code = RequestCode.UNREGISTER_CLIENT
    client_id: str
    producer_group: str = ""
    consumer_group: str = ""


class GetConsumerListByGroupRequest(Request, frozen=True, tag="get_consumer_list"):
    code = RequestCode.GET_CONSUMER_LIST_BY_GROUP
    consumer_group: str


class ConsumerListReply(Reply, frozen=True, tag="consumer_list"):
    client_ids: list[str]


class UpdateTopicRequest(Request, frozen=True, tag="update_topic"):
    code = RequestCode.UPDATE_AND_CREATE_TOPIC
    config: TopicConfig


class GetAllTopicConfigRequest(Request, frozen=True, tag="get_all_topic_config"):
    code = RequestCode.GET_ALL_TOPIC_CONFIG


class TopicConfigListReply(Reply, frozen=True, tag="topic_configs"):
    topics: list[TopicConfig]


class GetTopicStatsRequest(Request, frozen=True, tag="get_topic_stats"):
    code = RequestCode.GET_TOPIC_STATS_INFO
    topic: str


class TopicStatsReply(Reply, frozen=True, tag="topic_stats"):
    queues: list[QueueStat]


class GetBrokerRuntimeInfoRequest(Request, frozen=True, tag="get_broker_runtime_info"):
    code = RequestCode.GET_BROKER_RUNTIME_INFO


class BrokerRuntimeInfoReply(Reply, frozen=True, tag="broker_runtime_info"):
    info: dict[str, str]


# ---- broker-store (internal to a broker group) --------------------------------------------


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


class DispatchNotice(msgspec.Struct, frozen=True, tag="dispatch", tag_field="t"):
    """Published on the store's feed after each append; payload: the appended records.

    A hint only: subscribers persist the offset they applied and catch up with
    StoreReadLogRequest whenever `from_offset` is past what they have.
    """

    from_offset: int
    next_offset: int


# ---- queries, consumer coordination, retries (durable store; producers and consumers) ------


class SearchOffsetByTimestampRequest(Request, frozen=True, tag="search_offset_by_timestamp"):
    """The first queue offset whose message was stored at or after timestamp_ms (the max offset
    when none was). Served by remoting and, forwarded untouched, by the store."""

    code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
    topic: str
    queue_id: int
    timestamp_ms: int


class ViewMessageRequest(Request, frozen=True, tag="view_message"):
    """One stored record by CommitLog offset (what an offset message id decodes to).
    Served by remoting and, forwarded untouched, by the store."""

    code = RequestCode.VIEW_MESSAGE_BY_ID
    phys_offset: int


class ViewMessageReply(Reply, frozen=True, tag="view_message_reply"):
    """Payload: one frame holding the stored record."""

    phys_offset: int
    size: int


class DeleteExpiredCommitLogRequest(Request, frozen=True, tag="delete_expired_commitlog"):
    """Runs retention now instead of waiting for deleteWhen (mqadmin deleteExpiredCommitLog)."""

    code = RequestCode.DELETE_EXPIRED_COMMITLOG


class ConsumerSendMsgBackRequest(Request, frozen=True, tag="consumer_send_msg_back"):
    """A consumer gives a message back after a failed attempt: the broker re-stores it for a
    later retry (%RETRY%group, growing delay) or in %DLQ%group past max_reconsume_times."""

    code = RequestCode.CONSUMER_SEND_MSG_BACK
    consumer_group: str
    phys_offset: int  # where the failed message lies in the CommitLog
    origin_msg_id: str = ""
    origin_topic: str = ""
    delay_level: int = 0  # 0: the broker picks 3 + reconsume times; < 0: straight to the DLQ
    max_reconsume_times: int = 16


class LockBatchRequest(Request, frozen=True, tag="lock_batch_mq"):
    """Orderly consumers lock their queues on the broker; locks expire unless renewed."""

    code = RequestCode.LOCK_BATCH_MQ
    consumer_group: str
    client_id: str
    queues: list[OffsetEntry]  # topic and queue_id; offset unused (0)


class LockBatchReply(Reply, frozen=True, tag="lock_batch_mq_reply"):
    locked: list[OffsetEntry]


class UnlockBatchRequest(Request, frozen=True, tag="unlock_batch_mq"):
    code = RequestCode.UNLOCK_BATCH_MQ
    consumer_group: str
    client_id: str
    queues: list[OffsetEntry]


class ConsumerIdsChangedNotice(Reply, frozen=True, tag="consumer_ids_changed"):
    """Sent by the broker, unasked, to each member's connection (in a ReplyEnvelope with id 0)
    when a group's members change, so they rebalance at once."""

    consumer_group: str


# ---- transactions ---------------------------------------------------------------------------


class EndTransactionRequest(Request, frozen=True, tag="end_transaction"):
    """A producer ends a transaction: COMMIT stores the half message in its real topic, ROLLBACK
    drops it; both are recorded in RMQ_SYS_TRANS_OP_HALF_TOPIC. UNKNOWN changes nothing (the
    broker will ask again). A second end of the same half message changes nothing."""

    code = RequestCode.END_TRANSACTION
    producer_group: str
    commit_log_offset: int  # where the half message lies in the CommitLog
    resolution: int  # TransactionResolution
    tran_state_table_offset: int = 0  # the half message's queue offset
    msg_id: str = ""
    transaction_id: str = ""
    from_transaction_check: bool = False  # an answer to CheckTransactionStateNotice


class TransactionCheck(msgspec.Struct, frozen=True, omit_defaults=True):
    """One half message to ask its group about (in TransactionChecksReply)."""

    producer_group: str
    commit_log_offset: int
    record_size: int  # of its stored record in the reply's payload frame
    tran_state_table_offset: int = 0
    msg_id: str = ""
    transaction_id: str = ""
    check_times: int = 0  # checks before this one
    traceparent: str = ""  # the trace of the half message's send


class TransactionChecksRequest(Request, frozen=True, tag="transaction_checks"):
    """Remoting asks the scheduler for half messages due for a check (held up to suspend_ms
    when none is due); it passes each to a live producer of the group as a
    CheckTransactionStateNotice."""

    code = RequestCode.TRANSACTION_CHECKS
    max_checks: int = 64
    suspend_ms: int = 0


class TransactionChecksReply(Reply, frozen=True, tag="transaction_checks_reply"):
    """Payload (when checks is not empty): one frame of the checks' half records, in order."""

    checks: list[TransactionCheck] = []


class TransactionStateRequest(Request, frozen=True, tag="transaction_state"):
    """Remoting asks the scheduler whether a half message has ended already (for half messages
    stored before remoting's start: an end repeated across a remoting restart changes
    nothing)."""

    code = RequestCode.TRANSACTION_STATE
    commit_log_offset: int


class TransactionStateReply(Reply, frozen=True, tag="transaction_state_reply"):
    ended: bool = False  # committed, rolled back or moved to TRANS_CHECK_MAX_TIME_TOPIC
    pending: bool = False  # read in the log and waiting for its end


class CheckTransactionStateNotice(Reply, frozen=True, tag="check_transaction_state_notice"):
    """Sent by the broker, unasked (a ReplyEnvelope with id 0), to one producer of the group: it
    answers with EndTransactionRequest(from_transaction_check=True)."""

    producer_group: str
    commit_log_offset: int
    record: bytes  # the stored half record (ferry.protocol.record layout)
    tran_state_table_offset: int = 0
    msg_id: str = ""
    transaction_id: str = ""


# ---- message queries and the index service --------------------------------------------------

# end_ms of a query that wants everything up to now
MAX_QUERY_MS = (1 << 63) - 1


class QueryMessageRequest(Request, frozen=True, tag="query_message"):
    """Messages of `topic` carrying `key` in KEYS (or, with `unique`, whose UNIQ_KEY is `key`),
    stored within [begin_ms, end_ms]; newest first, at most max_num. Served by remoting from
    its broker's index."""

    code = RequestCode.QUERY_MESSAGE
    topic: str
    key: str
    unique: bool = False
    begin_ms: int = 0
    end_ms: int = MAX_QUERY_MS
    max_num: int = 32


class QueryMessageReply(Reply, frozen=True, tag="query_message_reply"):
    """Payload: one frame of `count` stored records, newest first (none: no frame content)."""

    count: int
    index_offset: int = 0  # CommitLog offset below which the index has every record
    index_last_ms: int = 0  # store time of the newest indexed key (-1: empty index)


class IndexHit(msgspec.Struct, frozen=True, array_like=True):
    phys_offset: int
    store_ms: int


class IndexQueryRequest(Request, frozen=True, tag="index_query"):
    """The index's entries of one key: CommitLog offsets and store times, newest first."""

    code = RequestCode.INDEX_QUERY
    topic: str
    key: str
    unique: bool = False
    begin_ms: int = 0
    end_ms: int = MAX_QUERY_MS
    max_num: int = 32


class IndexQueryReply(Reply, frozen=True, tag="index_query_reply"):
    hits: list[IndexHit]
    applied_offset: int = 0
    last_store_ms: int = -1


class IndexStatusRequest(Request, frozen=True, tag="index_status"):
    code = RequestCode.INDEX_STATUS


class IndexStatusReply(Reply, frozen=True, tag="index_status_reply"):
    applied_offset: int  # every CommitLog record below it is indexed
    files: int
    entries: int
    first_phys: int = -1  # CommitLog offset of the oldest indexed record
    last_store_ms: int = -1
    store_min_offset: int = 0  # the store's CommitLog, as last seen
    store_max_offset: int = 0
    caught_up: bool = False  # applied_offset reached store_max_offset when last asked
    rebuilding: bool = False
    rebuild_offset: int = 0  # how far a running rebuild has come
    # notices whose records were read from the store's log files, and failed reads (after
    # one, the records come on the feed)
    log_file_reads: int = 0
    log_file_misses: int = 0


class IndexRebuildRequest(Request, frozen=True, tag="index_rebuild"):
    """Rebuilds the index from the CommitLog beside the live one, then swaps them."""

    code = RequestCode.INDEX_REBUILD


# ---- the scheduler service (delay levels, timers) -------------------------------------------


class DelayLevelStatus(msgspec.Struct, frozen=True, array_like=True):
    level: int
    delay_ms: int
    offset: int  # next SCHEDULE_TOPIC_XXXX queue offset to deliver (RocketMQ's delayOffset)
    max_offset: int  # the queue's end, as last seen
    delivered: int = 0  # delivered since the scheduler started


class SchedulerStatusRequest(Request, frozen=True, tag="scheduler_status"):
    code = RequestCode.SCHEDULER_STATUS


class SchedulerStatusReply(Reply, frozen=True, tag="scheduler_status_reply"):
    levels: list[DelayLevelStatus]
    timer_queue_offset: int = 0  # next timer-topic queue offset to take into the wheel
    timer_queue_max: int = 0
    timer_pending: int = 0  # timers in the wheel, not yet delivered
    timer_read_ms: int = 0  # every timer due before this was delivered
    timer_delivered: int = 0  # since start
    skipped_duplicates: int = 0  # deliveries found done already after a restart
    # what other components of the scheduler report (e.g. transactions), name -> value
    extra: dict[str, str] = {}


class SchedulerProgress(msgspec.Struct, frozen=True, kw_only=True):
    """A scheduler's last saved progress (RocketMQ's delayOffset.json and timer checkpoint):
    the next queue offset of each delay level, the timer queue offset taken in and the timer
    read time, and `scan_from`, a CommitLog offset at or below every delivery the snapshot
    does not cover (the restart check that keeps deliveries exactly once)."""

    levels: dict[int, int] = {}
    timer_queue_offset: int = 0
    timer_read_ms: int = 0
    scan_from: int = 0
    saved_ms: int = 0  # wall time of the save: a newer snapshot replaces an older one


class SchedulerProgressRequest(Request, frozen=True, tag="scheduler_progress"):
    """Remoting asks its scheduler for its last saved progress (for a slave's sync)."""

    code = RequestCode.SCHEDULER_PROGRESS


class SchedulerProgressReply(Reply, frozen=True, tag="scheduler_progress_reply"):
    progress: SchedulerProgress | None = None  # None: nothing saved yet


class SchedulerAdoptProgressRequest(Request, frozen=True, tag="scheduler_adopt_progress"):
    """A slave's remoting hands its (idle) scheduler the master's progress, so that the slave
    restarted as master resumes where the master's scheduler was. Refused by a scheduler
    that is not a slave's (NO_PERMISSION); answered with OkReply."""

    code = RequestCode.SCHEDULER_ADOPT_PROGRESS
    progress: SchedulerProgress


# ---- consumer groups (producers and consumers) ---------------------------------------------


class QueryTopicConsumeByWhoRequest(Request, frozen=True, tag="query_topic_consume_by_who"):
    """The consumer groups of a topic on this broker: groups with a live member subscribed to
    it, and groups with a committed offset on it."""

    code = RequestCode.QUERY_TOPIC_CONSUME_BY_WHO
    topic: str


class GroupListReply(Reply, frozen=True, tag="group_list"):
    groups: list[str]


# ---- HA replication (ha-replicator) and slave metadata sync (remoting) ----------------------


class StoreReadRawRequest(Request, frozen=True, tag="store_read_raw"):
    """CommitLog bytes from `from_offset` exactly as they lie, blank segment tails included:
    what a master streams to its slaves. Whole records, one segment at most."""

    code = RequestCode.STORE_READ_RAW
    from_offset: int
    max_bytes: int = 1024 * 1024


class StoreReadRawReply(Reply, frozen=True, tag="store_read_raw_reply"):
    """Payload: one frame of next_offset - from_offset bytes (empty at the log end)."""

    from_offset: int
    next_offset: int
    min_offset: int
    max_offset: int


class StoreAppendRawRequest(Request, frozen=True, tag="store_append_raw"):
    """A slave's append. Payload: one frame of raw log bytes (as StoreReadRawReply gives them)
    that start at `from_offset`, which must be the slave store's log end."""

    code = RequestCode.STORE_APPEND_RAW
    from_offset: int


class StoreAppendRawReply(Reply, frozen=True, tag="store_append_raw_reply"):
    next_offset: int  # the log end after the append
    records: int = 0


class StoreLogDigestRequest(Request, frozen=True, tag="store_log_digest"):
    """CRC32 of the log bytes [from_offset, to_offset) (one segment at most): how a master
    and a slave check that their logs agree."""

    code = RequestCode.STORE_LOG_DIGEST
    from_offset: int
    to_offset: int


class StoreLogDigestReply(Reply, frozen=True, tag="store_log_digest_reply"):
    from_offset: int
    to_offset: int
    crc: int
    min_offset: int
    max_offset: int


class HaHelloRequest(Request, frozen=True, tag="ha_hello"):
    """A slave's ha-replicator introduces itself to its master's: where its log ends and the
    CRC32 of its last bytes [digest_from, max_offset), which the master compares with its own."""

    code = RequestCode.HA_HELLO
    broker_name: str
    broker_id: int
    max_offset: int
    digest_from: int = 0
    digest_crc: int = 0
    slave_addr: str = ""


class HaHelloReply(Reply, frozen=True, tag="ha_hello_reply"):
    session: int  # names the slave in its transfers
    start_offset: int  # where its transfers start
    master_max_offset: int


class HaTransferRequest(Request, frozen=True, tag="ha_transfer"):
    """A slave asks for the log from `from_offset`, which also acks every byte below it."""

    code = RequestCode.HA_TRANSFER
    session: int
    from_offset: int
    max_bytes: int = 1024 * 1024
    suspend_ms: int = 0  # hold up to this long when there is nothing new


class HaTransferReply(Reply, frozen=True, tag="ha_transfer_reply"):
    """Payload: one frame of next_offset - from_offset raw log bytes (empty: nothing new)."""

    from_offset: int
    next_offset: int
    master_max_offset: int


class HaWaitAckRequest(Request, frozen=True, tag="ha_wait_ack"):
    """Remoting of a SYNC_MASTER: answer once a slave acked the log up to `offset`."""

    code = RequestCode.HA_WAIT_ACK
    offset: int
    timeout_ms: int = 5000


class HaWaitAckReply(Reply, frozen=True, tag="ha_wait_ack_reply"):
    status: int  # SendStatus: SEND_OK, FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE
    acked_offset: int = 0


class HaSlaveStatus(msgspec.Struct, frozen=True, omit_defaults=True):
    broker_id: int
    addr: str = ""
    acked_offset: int = 0
    in_sync: bool = False  # within haMaxGapNotInSync of the master's log end
    last_ack_ms: int = 0


class HaStatusRequest(Request, frozen=True, tag="ha_status"):
    code = RequestCode.HA_STATUS


class HaStatusReply(Reply, frozen=True, tag="ha_status_reply"):
    role: str
    master_max_offset: int = 0  # a slave: the master's log end it heard last
    slaves: list[HaSlaveStatus] = []  # a master: its slaves
    # a slave's side
    master_ha_addr: str = ""
    connected: bool = False
    applied_offset: int = 0
    bytes_received: int = 0
    error: str = ""  # why the master refused this slave, if it did


class SyncedOffset(msgspec.Struct, frozen=True, array_like=True):
    group: str
    topic: str
    queue_id: int
    offset: int


class SyncedGroup(msgspec.Struct, frozen=True, omit_defaults=True):
    group_name: str
    consume_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16


class SlaveSyncRequest(Request, frozen=True, tag="slave_sync"):
    """A slave's remoting asks its master's for topics, subscription groups and consumer
    offsets (RocketMQ's SlaveSynchronize), handing over the offsets consumers committed on the
    slave since its last sync (the master keeps the larger of its own and these)."""

    code = RequestCode.SLAVE_SYNC
    broker_name: str
    offsets: list[SyncedOffset] = []


class SlaveSyncReply(Reply, frozen=True, tag="slave_sync_reply"):
    topics: list[TopicConfig] = []
    groups: list[SyncedGroup] = []
    offsets: list[SyncedOffset] = []
    scheduler: SchedulerProgress | None = None  # None: the master's scheduler gave none


# ---- administration (mqadmin) ---------------------------------------------------------------


class SubscriptionGroupConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A consumer group's settings on a broker (RocketMQ's SubscriptionGroupConfig)."""

    group_name: str
    consume_enable: bool = True  # False: pulls are refused (NO_PERMISSION)
    consume_broadcast_enable: bool = True
    consume_from_min_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16  # failed deliveries before %DLQ%group
    notify_consumer_ids_changed_enable: bool = True


class UpdateSubscriptionGroupRequest(Request, frozen=True, tag="update_subscription_group"):
    code = RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
    config: SubscriptionGroupConfig


class GetAllSubscriptionGroupRequest(Request, frozen=True, tag="get_all_subscription_group"):
    code = RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG


class SubscriptionGroupListReply(Reply, frozen=True, tag="subscription_groups"):
    groups: list[SubscriptionGroupConfig]


class DeleteSubscriptionGroupRequest(Request, frozen=True, tag="delete_subscription_group"):
    """Drops a group's config; with clean_offset also its committed offsets."""

    code = RequestCode.DELETE_SUBSCRIPTIONGROUP
    group_name: str
    clean_offset: bool = False


class DeleteTopicRequest(Request, frozen=True, tag="delete_topic_in_broker"):
    """Drops a topic's config, its committed offsets and (through the store) its
    ConsumeQueues; its records stay in the CommitLog until retention deletes them."""

    code = RequestCode.DELETE_TOPIC_IN_BROKER
    topic: str


class DeleteTopicInNamesrvRequest(Request, frozen=True, tag="delete_topic_in_namesrv"):
    """Drops a topic's route (of the brokers of `cluster` only, when given)."""

    code = RequestCode.DELETE_TOPIC_IN_NAMESRV
    topic: str
    cluster: str = ""


class StoreDeleteTopicRequest(Request, frozen=True, tag="store_delete_topic"):
    code = RequestCode.STORE_DELETE_TOPIC
    topic: str


class CleanExpiredConsumeQueueRequest(Request, frozen=True, tag="clean_expired_consumequeue"):
    """Drops ConsumeQueue entries and files below the CommitLog's min offset, and the queues
    wholly below it. Served by remoting and, forwarded untouched, by the store."""

    code = RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE


class QueuesCleanedReply(Reply, frozen=True, tag="queues_cleaned"):
    queues: int  # queues removed
    files: int  # ConsumeQueue files deleted
    entries: int = 0  # entries dropped from queues that stay


class GetBrokerConfigRequest(Request, frozen=True, tag="get_broker_config"):
    code = RequestCode.GET_BROKER_CONFIG


class BrokerConfigReply(Reply, frozen=True, tag="broker_config"):
    config: dict[str, str]  # broker.conf key -> value in force
    live_keys: list[str] = []  # the keys updateBrokerConfig changes without a restart


class UpdateBrokerConfigRequest(Request, frozen=True, tag="update_broker_config"):
    """Changes broker.conf keys in the running broker and keeps them in
    <storePathRootDir>/config/broker-overlay.conf; keys that need a restart are refused.
    Remoting forwards the store's keys to its store with StoreUpdateConfigRequest."""

    code = RequestCode.UPDATE_BROKER_CONFIG
    properties: dict[str, str]


class StoreUpdateConfigRequest(Request, frozen=True, tag="store_update_config"):
    code = RequestCode.STORE_UPDATE_CONFIG
    properties: dict[str, str]


class WipeWritePermRequest(Request, frozen=True, tag="wipe_write_perm"):
    """Name server: routes stop offering the broker's queues for writing until
    AddWritePermRequest, re-registrations included (drains a broker)."""

    code = RequestCode.WIPE_WRITE_PERM_OF_BROKER
    broker_name: str


class AddWritePermRequest(Request, frozen=True, tag="add_write_perm"):
    code = RequestCode.ADD_WRITE_PERM_OF_BROKER
    broker_name: str


class WritePermReply(Reply, frozen=True, tag="write_perm_reply"):
    topics: int  # topics of the broker whose route changed


class ClientConnection(msgspec.Struct, frozen=True, omit_defaults=True):
    client_id: str
    client_addr: str = ""
    language: str = ""
    version: str = ""
    last_heartbeat_ms: int = 0


class GetConsumerConnectionListRequest(Request, frozen=True, tag="get_consumer_connection_list"):
    code = RequestCode.GET_CONSUMER_CONNECTION_LIST
    consumer_group: str


class ConsumerConnectionReply(Reply, frozen=True, tag="consumer_connections"):
    connections: list[ClientConnection]
    consume_type: str = ""
    message_model: str = ""
    consume_from: str = ""
    subscriptions: list[SubscriptionData] = []


class GetProducerConnectionListRequest(Request, frozen=True, tag="get_producer_connection_list"):
    code = RequestCode.GET_PRODUCER_CONNECTION_LIST
    producer_group: str


class ProducerConnectionReply(Reply, frozen=True, tag="producer_connections"):
    connections: list[ClientConnection]
    # every producer group with a live producer on this broker (the console lists them)
    groups: list[str] = []


class ResetOffsetRequest(Request, frozen=True, tag="reset_offset"):
    """Sets a group's committed offsets of a topic's queues on this broker and tells the
    group's live members (ResetOffsetNotice) to go on from them."""

    code = RequestCode.INVOKE_BROKER_TO_RESET_OFFSET
    consumer_group: str
    topic: str
    offsets: list[OffsetEntry]
    timestamp_ms: int = -1  # what the offsets were searched for (logged only)


class ResetOffsetReply(Reply, frozen=True, tag="reset_offset_reply"):
    notified: int  # live members told


class ResetOffsetNotice(Reply, frozen=True, tag="reset_consumer_client_offset"):
    """Sent by the broker, unasked, to each live member of a group after ResetOffsetRequest."""

    consumer_group: str
    topic: str
    offsets: list[OffsetEntry]
    broker_name: str = ""  # the broker whose queues these are


class GetBrokerStatsRequest(Request, frozen=True, tag="view_broker_stats"):
    code = RequestCode.VIEW_BROKER_STATS_DATA


class TopicTraffic(msgspec.Struct, frozen=True, array_like=True):
    topic: str
    group: str  # "" for messages put
    total: int  # since the broker started
    tps: float  # over the last window_ms


class BrokerStatsReply(Reply, frozen=True, tag="broker_stats"):
    put: list[TopicTraffic]
    get: list[TopicTraffic]
    window_ms: int = 0


# ---- telemetry (every service answers; remoting serves the broker group's /metrics) ---------


class MetricsRequest(Request, frozen=True, tag="metrics"):
    code = RequestCode.METRICS


class MetricSample(msgspec.Struct, frozen=True, array_like=True):
    name: str  # the family name plus _bucket, _sum, _count for histograms
    labels: dict[str, str]
    value: float


class MetricFamily(msgspec.Struct, frozen=True):
    name: str
    kind: str  # counter, gauge, histogram (Prometheus types)
    help: str
    samples: list[MetricSample]


class MetricsReply(Reply, frozen=True, tag="metrics_reply"):
    service: str
    families: list[MetricFamily] = []


AnyRequest: TypeAlias = (
    PingRequest
    | StoreReadRawRequest
    | StoreAppendRawRequest
    | StoreLogDigestRequest
    | HaHelloRequest
    | HaTransferRequest
    | HaWaitAckRequest
    | HaStatusRequest
    | SlaveSyncRequest
    | RegisterBrokerRequest
    | UnregisterBrokerRequest
    | GetRouteInfoRequest
    | GetClusterInfoRequest
    | GetAllTopicListRequest
    | SendMessageRequest
    | PullMessageRequest
    | QueryConsumerOffsetRequest
    | UpdateConsumerOffsetRequest
    | GetMaxOffsetRequest
    | GetMinOffsetRequest
    | HeartbeatRequest
    | UnregisterClientRequest
    | GetConsumerListByGroupRequest
    | UpdateTopicRequest
    | GetAllTopicConfigRequest
    | GetTopicStatsRequest
    | GetBrokerRuntimeInfoRequest
    | StorePutRequest
    | StoreGetRequest
    | StoreQueueOffsetsRequest
    | StoreReadLogRequest
    | StoreStatusRequest
    | SearchOffsetByTimestampRequest
    | ViewMessageRequest
    | DeleteExpiredCommitLogRequest
    | ConsumerSendMsgBackRequest
    | LockBatchRequest
    | UnlockBatchRequest
    | QueryMessageRequest
    | IndexQueryRequest
    | IndexStatusRequest
    | IndexRebuildRequest
    | QueryTopicConsumeByWhoRequest
    | UpdateSubscriptionGroupRequest
    | GetAllSubscriptionGroupRequest
    | DeleteSubscriptionGroupRequest
    | DeleteTopicRequest
    | DeleteTopicInNamesrvRequest
    | StoreDeleteTopicRequest
    | CleanExpiredConsumeQueueRequest
    | GetBrokerConfigRequest
    | UpdateBrokerConfigRequest
    | StoreUpdateConfigRequest
    | WipeWritePermRequest
    | AddWritePermRequest
    | GetConsumerConnectionListRequest
    | GetProducerConnectionListRequest
    | ResetOffsetRequest
    | GetBrokerStatsRequest
    | SchedulerStatusRequest
    | SchedulerProgressRequest
    | SchedulerAdoptProgressRequest
    | EndTransactionRequest
    | TransactionChecksRequest
    | TransactionStateRequest
    | MetricsRequest
)

AnyReply: TypeAlias = (
    OkReply
    | StoreReadRawReply
    | StoreAppendRawReply
    | StoreLogDigestReply
    | HaHelloReply
    | HaTransferReply
    | HaWaitAckReply
    | HaStatusReply
    | SlaveSyncReply
    | ErrorReply
    | PongReply
    | RegisterBrokerReply
    | RouteInfoReply
    | ClusterInfoReply
    | TopicListReply
    | SendMessageReply
    | PullMessageReply
    | OffsetReply
    | ConsumerListReply
    | TopicConfigListReply
    | TopicStatsReply
    | BrokerRuntimeInfoReply
    | StorePutReply
    | StoreGetReply
    | StoreQueueOffsetsReply
    | StoreReadLogReply
    | StoreStatusReply
    | ViewMessageReply
    | LockBatchReply
    | ConsumerIdsChangedNotice
    | QueryMessageReply
    | IndexQueryReply
    | IndexStatusReply
    | GroupListReply
    | SubscriptionGroupListReply
    | QueuesCleanedReply
    | BrokerConfigReply
    | WritePermReply
    | ConsumerConnectionReply
    | ProducerConnectionReply
    | ResetOffsetReply
    | ResetOffsetNotice
    | BrokerStatsReply
    | SchedulerStatusReply
    | SchedulerProgressReply
    | CheckTransactionStateNotice
    | TransactionChecksReply
    | TransactionStateReply
    | MetricsReply
)


def request_types() -> list[type[Request]]:
    return list(AnyRequest.__args__)


def reply_types() -> list[type[Reply]]:
    return list(AnyReply.__args__)


def wire_tag(cls: type[msgspec.Struct]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    return tag
