"""Message queries (remoting, for clients) and the index service that answers them."""

from __future__ import annotations

from typing import Protocol, TypeAlias

import msgspec

from ferry.protocol.codes import RequestCode
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages.common import Reply, Request
from ferry.protocol.names import check_topic

# ---- message queries and the index service --------------------------------------------------


# end_ms of a query that wants everything up to now
MAX_QUERY_MS = (1 << 63) - 1
# what one query may ask: remoting checks a client's, the index checks remoting's again
MAX_QUERY_NUM = 1000
MAX_KEY_LENGTH = 1024


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


class KeyQuery(Protocol):
    """What QueryMessageRequest and IndexQueryRequest share."""

    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def begin_ms(self) -> int: ...
    @property
    def end_ms(self) -> int: ...
    @property
    def max_num(self) -> int: ...


def check_query(req: KeyQuery) -> None:
    """InvalidParameterError unless the query is within bounds."""
    check_topic(req.topic)
    if not req.key or len(req.key) > MAX_KEY_LENGTH:
        raise InvalidParameterError(f"a key is 1 to {MAX_KEY_LENGTH} characters")
    if not 1 <= req.max_num <= MAX_QUERY_NUM:
        raise InvalidParameterError(f"max_num must be within 1..{MAX_QUERY_NUM}")
    if req.begin_ms > req.end_ms:
        raise InvalidParameterError(f"begin_ms {req.begin_ms} is after end_ms {req.end_ms}")


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


# this role's requests and replies: AnyRequest and AnyReply (the package) join them
IndexRequest: TypeAlias = (
    QueryMessageRequest | IndexQueryRequest | IndexStatusRequest | IndexRebuildRequest
)

IndexReply: TypeAlias = QueryMessageReply | IndexQueryReply | IndexStatusReply
