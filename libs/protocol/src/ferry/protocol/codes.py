"""Request and response codes.

Numbers follow RocketMQ's RequestCode / ResponseCode where RocketMQ has the same operation, so
that people who know mqadmin and broker logs read them as they expect. Codes Ferry needs and
RocketMQ does not have live at 10000 and above.
"""

from enum import IntEnum


class RequestCode(IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    GET_CONSUMER_LIST_BY_GROUP = 38
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    GET_TOPIC_STATS_INFO = 202
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    SEND_BATCH_MESSAGE = 320
    DELETE_EXPIRED_COMMITLOG = 329
    # Ferry-only: health and the broker-internal store protocol.
    PING = 10000
    STORE_PUT = 10001
    STORE_GET = 10002
    STORE_QUEUE_OFFSETS = 10003
    STORE_READ_LOG = 10004
    STORE_STATUS = 10005
    # Ferry-only: the index service's own requests.
    INDEX_QUERY = 10020
    INDEX_STATUS = 10021
    INDEX_REBUILD = 10022


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    INVALID_PARAMETER = 29
    CONSUMER_NOT_ONLINE = 206
    BROKER_NOT_EXIST = 211
    FLOW_CONTROL = 215
    ILLEGAL_OPERATION = 604
    GO_AWAY = 1500
    RPC_SEND_TO_CHANNEL_FAILED = -1004
    RPC_TIME_OUT = -1006
    # Ferry-only.
    BAD_FRAME = 10000
    DISK_FULL = 10001


class SendStatus(IntEnum):
    """Send outcomes; every one of them means the message is stored on the master."""

    SEND_OK = ResponseCode.SUCCESS
    FLUSH_DISK_TIMEOUT = ResponseCode.FLUSH_DISK_TIMEOUT
    SLAVE_NOT_AVAILABLE = ResponseCode.SLAVE_NOT_AVAILABLE
    FLUSH_SLAVE_TIMEOUT = ResponseCode.FLUSH_SLAVE_TIMEOUT


class PullStatus(IntEnum):
    FOUND = ResponseCode.SUCCESS
    NO_NEW_MSG = ResponseCode.PULL_NOT_FOUND
    NO_MATCHED_MSG = ResponseCode.PULL_RETRY_IMMEDIATELY
    OFFSET_ILLEGAL = ResponseCode.PULL_OFFSET_MOVED


class Perm(IntEnum):
    """Topic and broker permission bits, as RocketMQ's PermName."""

    INHERIT = 1
    WRITE = 2
    READ = 4
    READ_WRITE = 6
