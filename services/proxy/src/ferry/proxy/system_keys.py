"""The property names a RocketMQ 5 client never sees among a message's user properties:
RocketMQ's reserved ones (its MessageConst set: what brokers and clients write for
themselves, such as WAIT from a 4.x producer or the timer's bookkeeping) and Ferry's own
internal ones. A consumer of a message sent by any client gets back only what its producer
set (test_proxy_interop_4x)."""

from __future__ import annotations

from ferry.client.pop_codec import PROPERTY_RECEIPT_HANDLE
from ferry.protocol.record import SYSTEM_PROPERTIES

ROCKETMQ_RESERVED = frozenset(
    {
        "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
        "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION",
        "TRACE_ON", "UNIQ_KEY", "EXTEND_UNIQ_INFO", "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "__STARTDELIVERTIME", "CLUSTER",
        "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME",
        "INSTANCE_ID", "MSG_TYPE", "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "__SHARDINGKEY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
        "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES",
        "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "__BORNHOST", "INNER_NUM",
        "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "TRACE_CONTEXT",
        "__TRANSACTIONID__", "__RECALL_HANDLE",
    }
)  # fmt: skip
FERRY_INTERNAL = frozenset({"SCHEDULED_FROM", "REPLY_TO_BROKER", PROPERTY_RECEIPT_HANDLE})
# the W3C trace context goes in its own field (system_properties.trace_context)
TRACE_KEYS = frozenset({"traceparent", "tracestate"})

NOT_USER = SYSTEM_PROPERTIES | ROCKETMQ_RESERVED | FERRY_INTERNAL | TRACE_KEYS
