"""What producers and consumers ask a broker (remoting), and what it tells them unasked."""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import (
    OffsetEntry,
    QueueStat,
    Reply,
    Request,
    SubscriptionData,
    TopicConfig,
)

# ---- broker (client facing) -----------------------------------------------------------------


class ConsumerData(msgspec.Struct, frozen=True, omit_defaults=True):
    group: str
    consume_type: str = "PULL"  # PULL (lite pull) or PUSH
    message_model: str = "CLUSTERING"
    consume_from: str = "LAST_OFFSET"
    subscriptions: list[SubscriptionData] = []


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
    # request/reply (count 1): the broker stamps its cluster and address on the record
    # (ferry.protocol.messages.reply), where the reply finds its way back
    request_reply: bool = False


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
    expression: str = "*"  # tags: "*" or "TagA || TagB"; or an SQL92 filter
    commit_offset: int = -1  # piggybacked consumer offset commit; -1 for none
    expression_type: str = "TAG"  # or SQL92 (needs enablePropertyFilter=true)


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


# ---- queries, consumer coordination, retries (durable store; producers and consumers) -------


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


# ---- transactions (the producer's side) -----------------------------------------------------


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
    # the half message's real topic (checked against it): what authorization checks Pub on;
    # empty (older clients): Pub on the producer group
    topic: str = ""


class CheckTransactionStateNotice(Reply, frozen=True, tag="check_transaction_state_notice"):
    """Sent by the broker, unasked (a ReplyEnvelope with id 0), to one producer of the group: it
    answers with EndTransactionRequest(from_transaction_check=True)."""

    producer_group: str
    commit_log_offset: int
    record: bytes  # the stored half record (ferry.protocol.record layout)
    tran_state_table_offset: int = 0
    msg_id: str = ""
    transaction_id: str = ""


# ---- consumer groups (producers and consumers) ----------------------------------------------


class QueryTopicConsumeByWhoRequest(Request, frozen=True, tag="query_topic_consume_by_who"):
    """The consumer groups of a topic on this broker: groups with a live member subscribed to
    it, and groups with a committed offset on it."""

    code = RequestCode.QUERY_TOPIC_CONSUME_BY_WHO
    topic: str


class GroupListReply(Reply, frozen=True, tag="group_list"):
    groups: list[str]


# this role's requests and replies: AnyRequest and AnyReply (the package) join them
ClientRequest: TypeAlias = (
    SendMessageRequest
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
    | SearchOffsetByTimestampRequest
    | ViewMessageRequest
    | DeleteExpiredCommitLogRequest
    | ConsumerSendMsgBackRequest
    | LockBatchRequest
    | UnlockBatchRequest
    | EndTransactionRequest
    | QueryTopicConsumeByWhoRequest
)

ClientReply: TypeAlias = (
    SendMessageReply
    | PullMessageReply
    | OffsetReply
    | ConsumerListReply
    | TopicConfigListReply
    | TopicStatsReply
    | BrokerRuntimeInfoReply
    | ViewMessageReply
    | LockBatchReply
    | ConsumerIdsChangedNotice
    | CheckTransactionStateNotice
    | GroupListReply
)
