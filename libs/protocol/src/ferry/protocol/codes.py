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
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
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
    SEND_REPLY_MESSAGE = 324  # request/reply: a replier's reply
    DELETE_EXPIRED_COMMITLOG = 329
    # administration (mqadmin), RocketMQ's numbers
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    DELETE_SUBSCRIPTIONGROUP = 207
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    RESET_CONSUMER_CLIENT_OFFSET = 220
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    VIEW_BROKER_STATS_DATA = 315
    ADD_WRITE_PERM_OF_BROKER = 327
    # the name server's kv store and config
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    QUERY_CONSUME_QUEUE = 321
    # controller mode (RocketMQ 5's numbers): a broker's heartbeat to the controller, the
    # controller's requests, and the broker's epoch cache (asked by getBrokerEpoch)
    BROKER_HEARTBEAT = 904
    GET_BROKER_HA_STATUS = 907
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    CLEAN_BROKER_DATA = 1011
    # users and ACLs (RocketMQ 5.3's ACL 2.0, its numbers)
    AUTH_CREATE_USER = 3001
    AUTH_UPDATE_USER = 3002
    AUTH_DELETE_USER = 3003
    AUTH_GET_USER = 3004
    AUTH_LIST_USER = 3005
    AUTH_CREATE_ACL = 3006
    AUTH_UPDATE_ACL = 3007
    AUTH_DELETE_ACL = 3008
    AUTH_GET_ACL = 3009
    AUTH_LIST_ACL = 3010
    # pop consumption (RocketMQ 5's numbers)
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    BATCH_ACK_MESSAGE = 200151
    # the rest of RocketMQ's codes: a RocketMQ client or tool may send any of them, and
    # the RocketMQ door names what it refuses
    QUERY_BROKER_OFFSET = 13
    UPDATE_AND_CREATE_TOPIC_LIST = 18
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    TRIGGER_DELETE_FILES = 27
    GET_EARLIEST_MSG_STORETIME = 32
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    GET_CLIENT_CONFIG = 47
    GET_TIMER_CHECK_POINT = 60
    GET_TIMER_METRICS = 61
    GET_CONSUME_STATS = 208
    SUSPEND_CONSUMER = 209
    RESUME_CONSUMER = 210
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    ADJUST_CONSUMER_THREAD_POOL = 213
    WHO_CONSUME_THE_MESSAGE = 214
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST = 225
    REGISTER_FILTER_SERVER = 301
    REGISTER_MESSAGE_FILTER_CLASS = 302
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    GET_CONSUMER_RUNNING_INFO = 307
    QUERY_CORRECTION_OFFSET = 308
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    CLONE_GROUP_OFFSET = 314
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    QUERY_DATA_VERSION = 322
    RESUME_CHECK_HALF_MESSAGE = 323
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    GET_ALL_PRODUCER_INFO = 328
    QUERY_TOPICS_BY_CONSUMER = 343
    QUERY_SUBSCRIPTION_BY_CONSUMER = 345
    GET_TOPIC_CONFIG = 351
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    UPDATE_AND_GET_GROUP_FORBIDDEN = 353
    CHECK_ROCKSDB_CQ_WRITE_PROGRESS = 354
    EXPORT_ROCKSDB_CONFIG_TO_JSON = 355
    LITE_PULL_MESSAGE = 361
    RECALL_MESSAGE = 370
    QUERY_ASSIGNMENT = 400
    SET_MESSAGE_REQUEST_MODE = 401
    GET_ALL_MESSAGE_REQUEST_MODE = 402
    UPDATE_AND_CREATE_STATIC_TOPIC = 513
    GET_BROKER_MEMBER_GROUP = 901
    ADD_BROKER = 902
    REMOVE_BROKER = 903
    NOTIFY_MIN_BROKER_ID_CHANGE = 905
    EXCHANGE_BROKER_HA_INFO = 906
    RESET_MASTER_FLUSH_OFFSET = 908
    CONTROLLER_GET_REPLICA_INFO = 1004
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    UPDATE_CONTROLLER_CONFIG = 1009
    GET_CONTROLLER_CONFIG = 1010
    CONTROLLER_GET_NEXT_BROKER_ID = 1012
    CONTROLLER_APPLY_BROKER_ID = 1013
    UPDATE_COLD_DATA_FLOW_CTR_CONFIG = 2001
    REMOVE_COLD_DATA_FLOW_CTR_CONFIG = 2002
    GET_COLD_DATA_FLOW_CTR_INFO = 2003
    SET_COMMITLOG_READ_MODE = 2004
    PEEK_MESSAGE = 200052
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    POP_ROLLBACK = 200056
    # Ferry-only: health and the broker-internal store protocol.
    PING = 10000
    # request/reply: a requester's held poll for its replies (RocketMQ pushes them instead)
    POLL_REPLIES = 10110
    STORE_PUT = 10001
    STORE_GET = 10002
    STORE_QUEUE_OFFSETS = 10003
    STORE_READ_LOG = 10004
    STORE_STATUS = 10005
    # Ferry-only: raw CommitLog ranges for HA replication (master reads, slave appends).
    STORE_READ_RAW = 10006
    STORE_APPEND_RAW = 10007
    STORE_LOG_DIGEST = 10008
    # Ferry-only: the index service's own requests.
    INDEX_QUERY = 10020
    INDEX_STATUS = 10021
    INDEX_REBUILD = 10022
    # Ferry-only: HA replication (ha-replicator) and slave metadata sync (remoting).
    HA_HELLO = 10050
    HA_TRANSFER = 10051
    HA_WAIT_ACK = 10052
    HA_STATUS = 10053
    SLAVE_SYNC = 10054
    GRANT_WRITE_LEASE = 10055  # controller mode: the broker agent to remoting
    # Ferry-only: remoting asks the check-back service which half messages to check, and
    # whether one has ended; its figures
    TRANSACTION_CHECKS = 10040
    TRANSACTION_STATE = 10041
    TRANSACTION_CHECK_STATUS = 10042
    # Ferry-only: the scheduler's own requests.
    SCHEDULER_STATUS = 10030
    # a master's scheduler progress, read by remoting for its slaves; a slave's adopts it
    SCHEDULER_PROGRESS = 10031
    SCHEDULER_ADOPT_PROGRESS = 10032
    # pop consumption: remoting has the scheduler's revive service record a checkpoint
    POP_CHECKPOINT = 10033
    # Ferry-only: remoting asks its store to drop a deleted topic's queues / take live config.
    STORE_DELETE_TOPIC = 10060
    STORE_UPDATE_CONFIG = 10061
    # controller mode, allAckInSyncStateSet: how far the in-sync set holds the log
    STORE_CONFIRM_OFFSET = 10062
    # Ferry-only: any service's OTel metrics, gathered by remoting for /metrics
    METRICS = 10070
    # Ferry-only: every user and ACL of a broker at once (a slave's remoting asks its master's)
    GET_AUTH_SNAPSHOT = 10080
    PUSH_AUTH_SNAPSHOT = 10081
    # Ferry-only, controller mode: a broker tree's agent asks its supervisor (messages.tree)
    TREE_STATUS = 10100
    TREE_RECONFIGURE = 10101


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
    # the controller's (RocketMQ 5's numbers)
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    CONTROLLER_JRAFT_INTERNAL_ERROR = 2015
    CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016
    # ACL 2.0 (RocketMQ 5.3's numbers)
    USER_NOT_EXIST = 3001
    POLICY_NOT_EXIST = 3002
    RPC_SEND_TO_CHANNEL_FAILED = -1004
    RPC_TIME_OUT = -1006
    # the rest of RocketMQ's codes: a RocketMQ client or tool may send any of them, and
    # the RocketMQ door names what it refuses
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    BROKER_DISPATCH_NOT_COMPLETE = 212
    BROADCAST_CONSUMPTION = 213
    NOT_LEADER_FOR_QUEUE = 501
    RPC_UNKNOWN = -1000
    RPC_ADDR_IS_NULL = -1002
    # Ferry-only.
    BAD_FRAME = 10000
    DISK_FULL = 10001
    # a slave's CommitLog does not match its master's (or lies outside it): not replicated
    HA_LOG_DIVERGED = 10050
    # createUser of a name already taken (RocketMQ has no code for it)
    USER_EXIST_ALREADY = 10080
    # authentication on: a request without a signature, or one whose signature does not check
    # (unknown or disabled user, wrong secret, too old); NO_PERMISSION 16 is the ACL's refusal
    AUTH_NO_CREDENTIALS = 10060
    AUTH_BAD_SIGNATURE = 10061
    # controller mode: fewer replicas in sync than minInSyncReplicas; the write is refused
    # before it is stored (RocketMQ's PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH)
    IN_SYNC_REPLICAS_NOT_ENOUGH = 10051
    # pop consumption: an ack or change of invisible time whose receipt handle the broker
    # does not hold (unknown, already acked, changed since, or past its invisible time)
    INVALID_RECEIPT_HANDLE = 10090


class SendStatus(IntEnum):
    """Send outcomes; every one of them means the message is stored on the master."""

    SEND_OK = ResponseCode.SUCCESS
    FLUSH_DISK_TIMEOUT = ResponseCode.FLUSH_DISK_TIMEOUT
    SLAVE_NOT_AVAILABLE = ResponseCode.SLAVE_NOT_AVAILABLE
    FLUSH_SLAVE_TIMEOUT = ResponseCode.FLUSH_SLAVE_TIMEOUT


class TransactionResolution(IntEnum):
    """How a transaction ends (END_TRANSACTION), numbered as RocketMQ's MessageSysFlag types."""

    UNKNOWN = 0
    COMMIT = 0x8
    ROLLBACK = 0xC


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
