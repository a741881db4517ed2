"""More of mqadmin on a broker: queryCq (ConsumeQueue entries, answered by the store through
remoting) and haStatus (the group's HA replication, answered by the ha-replicator through
remoting)."""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import Reply, Request

MAX_CQ_ENTRIES = 1000  # one queryCq answer at most


class QueryConsumeQueueRequest(Request, frozen=True, tag="query_consume_queue"):
    code = RequestCode.QUERY_CONSUME_QUEUE
    topic: str
    queue_id: int
    index: int  # the first queue offset to read
    count: int = 10


class CqEntry(msgspec.Struct, frozen=True, array_like=True):
    queue_offset: int
    commitlog_offset: int
    size: int
    tags_code: int
    store_ms: int  # -1 when the record is no longer in the CommitLog


class ConsumeQueueReply(Reply, frozen=True, tag="consume_queue_entries"):
    min_offset: int
    max_offset: int
    entries: list[CqEntry] = []


class GetBrokerHaStatusRequest(Request, frozen=True, tag="get_broker_ha_status"):
    """To remoting: it asks its group's ha-replicator (`ha_status`) and relays the answer."""

    code = RequestCode.GET_BROKER_HA_STATUS


BrokerAdminRequest: TypeAlias = QueryConsumeQueueRequest | GetBrokerHaStatusRequest

BrokerAdminReply: TypeAlias = ConsumeQueueReply
