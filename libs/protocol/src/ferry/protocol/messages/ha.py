"""HA replication (ha-replicator, and the raw log it reads and appends through the store) and
slave metadata sync (remoting)."""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import Reply, Request, TopicConfig
from ferry.protocol.messages.scheduler import SchedulerProgress

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
    # allAckInSyncStateSet: how far every slave of the in-sync set holds the log (0: not
    # known); the slave's store reads no further (ferry.runtime.confirm_relay)
    confirmed: int = 0


class HaWaitAckRequest(Request, frozen=True, tag="ha_wait_ack"):
    """Remoting of a SYNC_MASTER: answer once a slave acked the log up to `offset`.

    all_of (controller mode, allAckInSyncStateSet): the slaves of the group's in-sync set, ALL
    of which must ack; it replaces the set earlier waits wait on. offset 0 only hands over a
    changed set (answered SEND_OK at once)."""

    code = RequestCode.HA_WAIT_ACK
    offset: int
    timeout_ms: int = 5000
    all_of: list[int] | None = None
    # with all_of (controller mode without allAckInSyncStateSet): the answer waits for any
    # one slave of the set, not every one; readers still stop where the whole set holds
    any_one: bool = False


class HaWaitAckReply(Reply, frozen=True, tag="ha_wait_ack_reply"):
    status: int  # SendStatus: SEND_OK, FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE
    # how far the log is safe: with all_of, how far the whole set holds it (the confirm offset)
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
    diverged_from: int = 0  # then: where the bytes it compared begin
    store_refusal: str = ""  # why the own store refuses the master's bytes (a full disk)


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
    consume_message_orderly: bool = False


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


# this role's requests and replies: AnyRequest and AnyReply (the package) join them
class GrantWriteLeaseRequest(Request, frozen=True, tag="grant_write_lease"):
    """Controller mode: the broker's agent tells remoting until when it may acknowledge
    writes as master (a CLOCK_MONOTONIC time of this host, in seconds: the agent and remoting
    run on one machine), under which epoch. until 0: not master (now or any more)."""

    code = RequestCode.GRANT_WRITE_LEASE
    until_monotonic: float
    epoch: int
    # the replicas in sync: the controller's set joined with the one the master just proposed
    # (either may be elected); what allAckInSyncStateSet waits for and minInSyncReplicas counts
    sync_state_set: list[int] = []


HaRequest: TypeAlias = (
    StoreReadRawRequest
    | StoreAppendRawRequest
    | StoreLogDigestRequest
    | HaHelloRequest
    | HaTransferRequest
    | HaWaitAckRequest
    | HaStatusRequest
    | SlaveSyncRequest
    | GrantWriteLeaseRequest
)

HaReply: TypeAlias = (
    StoreReadRawReply
    | StoreAppendRawReply
    | StoreLogDigestReply
    | HaHelloReply
    | HaTransferReply
    | HaWaitAckReply
    | HaStatusReply
    | SlaveSyncReply
)
