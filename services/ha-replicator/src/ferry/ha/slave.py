"""The slave side of replication (RocketMQ's HAClient).

Start: ask the own store where its log ends and for a CRC32 of its last bytes, say hello to
the master with them; then ask for the log from that end, append what comes through the own
store (which checks every record, keeps the bytes at the master's offsets and dispatches
ConsumeQueues, index and feed as for any put), and ask again: each request acks the bytes
below it. A request is held on the master up to haSendHeartbeatInterval when there is nothing
new, so an idle slave still reports its offset that often.

A master that refuses the slave (its log diverged) is logged loudly and asked again only
after a long pause; nothing is merged. In controller mode the broker agent sees the refusal
in the status (error, diverged_from) and rebuilds the slave: it cuts the log back and
restarts the store and this service.
"""

from __future__ import annotations

import logging
from typing import Any

from ferry.ha.config import HaConfig
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    HaHelloReply,
    HaHelloRequest,
    HaTransferReply,
    HaTransferRequest,
    StoreAppendRawReply,
    StoreAppendRawRequest,
    StoreLogDigestReply,
    StoreLogDigestRequest,
    StoreStatusReply,
    StoreStatusRequest,
)
from ferry.protocol.span_attributes import messaging
from ferry.runtime import telemetry
from ferry.runtime.confirm_relay import ConfirmRelay
from ferry.runtime.service import Peer, Service

log = logging.getLogger("ferry.ha.slave")

TRACER = "ferry.ha"
REPLICATE_ATTRS = messaging("replicate")

DIGEST_SPAN = 4096  # the last bytes compared with the master's
RETRY_S = 1.0  # after a lost master, a timeout or a store error
REFUSED_RETRY_S = 30.0  # after the master refused this slave
STORE_TIMEOUT_S = 10.0
HELLO_TIMEOUT_S = 5.0


class SlaveReplicator:
    def __init__(self, config: HaConfig, service: Service, store: Peer, addr: str = "") -> None:
        self.config = config
        self.service = service
        self.store = store
        # allAckInSyncStateSet: the store's readers see only what the master's set holds
        self._confirm = ConfirmRelay(store)
        self.addr = addr
        self.master_addr = config.ha_master_address
        self.master = service.connect_peer(f"tcp://{self.master_addr}")
        self.session = 0
        self.applied = 0  # the own log's end
        self.master_max = 0
        self.connected = False
        self.error = ""
        self.diverged_from = 0  # where the compared bytes began, when refused
        # why the own store refuses the master's bytes (a full disk), apart from `error`:
        # a refusal by the master is divergence, which the broker agent repairs by a rebuild
        self.store_refusal = ""
        self._digest_from = 0
        self.bytes_received = 0
        self._epoch = 0  # bumped on every (re)connect: answers to older requests are dropped
        self._suspend_ms = config.ha_send_heartbeat_interval
        self._stopped = False

    def start(self) -> None:
        self._connect()

    def stop(self) -> None:
        self._stopped = True

    # ---- connecting ----

    def _connect(self) -> None:
        if self._stopped:
            return
        self._epoch += 1
        self.connected = False
        self.session = 0
        epoch = self._epoch
        self.store.request(
            StoreStatusRequest(),
            lambda body, frames: self._on_status(epoch, body),
            timeout_s=STORE_TIMEOUT_S,
        )

    def _retry(self, delay_s: float) -> None:
        self._epoch += 1
        self.connected = False
        epoch = self._epoch
        self.service.later(delay_s, lambda: self._connect() if epoch == self._epoch else None)

    def _on_status(self, epoch: int, body: AnyReply) -> None:
        if epoch != self._epoch:
            return
        if not isinstance(body, StoreStatusReply):
            log.warning("own store did not answer its status: %s", _describe(body))
            self._retry(RETRY_S)
            return
        end = self.applied = body.max_offset
        if end == 0 or end <= body.min_offset:
            self._hello(epoch, end, 0, 0)
            return
        seg = self.config.mapped_file_size_commit_log
        start = max(end - DIGEST_SPAN, (end - 1) - (end - 1) % seg, body.min_offset)

        def on_digest(reply: AnyReply, _frames: list[Any]) -> None:
            if epoch != self._epoch:
                return
            if isinstance(reply, StoreLogDigestReply):
                self._hello(epoch, end, start, reply.crc)
            else:
                log.warning("own store gave no digest: %s", _describe(reply))
                self._retry(RETRY_S)

        self.store.request(StoreLogDigestRequest(start, end), on_digest, timeout_s=STORE_TIMEOUT_S)

    def _hello(self, epoch: int, end: int, digest_from: int, crc: int) -> None:
        self._digest_from = digest_from
        req = HaHelloRequest(
            broker_name=self.config.broker_name,
            broker_id=self.config.broker_id,
            max_offset=end,
            digest_from=digest_from,
            digest_crc=crc,
            slave_addr=self.addr,
        )
        self.master.request(
            req, lambda body, frames: self._on_hello(epoch, body), timeout_s=HELLO_TIMEOUT_S
        )

    def _on_hello(self, epoch: int, body: AnyReply) -> None:
        if epoch != self._epoch:
            return
        if isinstance(body, HaHelloReply):
            if self.error:
                log.info("master %s accepts this slave again", self.master_addr)
            self.error = ""
            self.session = body.session
            self.master_max = body.master_max_offset
            self.applied = max(self.applied, body.start_offset)
            self.connected = True
            log.info(
                "replicating from master %s at offset %d (master at %d)",
                self.master_addr,
                self.applied,
                body.master_max_offset,
            )
            self._transfer(epoch)
            return
        if isinstance(body, ErrorReply) and body.code == ResponseCode.HA_LOG_DIVERGED:
            if body.message != self.error:
                log.error(
                    "master %s refuses this slave, which stays out of sync: %s",
                    self.master_addr,
                    body.message,
                )
            self.error = body.message
            self.diverged_from = self._digest_from
            self._retry(REFUSED_RETRY_S)
            return
        log.info("master %s not reachable: %s", self.master_addr, _describe(body))
        self._retry(RETRY_S)

    # ---- transferring ----

    def _transfer(self, epoch: int) -> None:
        if epoch != self._epoch or self._stopped:
            return
        req = HaTransferRequest(
            session=self.session,
            from_offset=self.applied,
            max_bytes=self.config.ha_transfer_batch_size,
            suspend_ms=self._suspend_ms,
        )
        self.master.request(
            req,
            lambda body, frames: self._on_transfer(epoch, body, frames),
            timeout_s=self._suspend_ms / 1000 + HELLO_TIMEOUT_S,
        )

    def _on_transfer(self, epoch: int, body: AnyReply, frames: list[Any]) -> None:
        if epoch != self._epoch:
            return
        if not isinstance(body, HaTransferReply):
            log.warning("master %s: %s; connecting again", self.master_addr, _describe(body))
            self._retry(RETRY_S)
            return
        self.master_max = body.master_max_offset
        if body.confirmed:
            self._confirm.advance(body.confirmed)
        data = frames[0] if frames else b""
        if body.next_offset <= body.from_offset or not data:
            self._transfer(epoch)  # nothing new: ask again (the ask is the heartbeat)
            return
        if body.from_offset != self.applied or len(data) != body.next_offset - body.from_offset:
            log.warning(
                "master sent [%d, %d) with %d bytes while this slave is at %d; connecting again",
                body.from_offset,
                body.next_offset,
                len(data),
                self.applied,
            )
            self._retry(RETRY_S)
            return
        self.bytes_received += len(data)
        # traced messages in the bytes: one span for the transfer, under the first one's send
        span = telemetry.feed_span(TRACER, "ha replicate", data, **REPLICATE_ATTRS)

        def on_append(reply: AnyReply, _frames: list[Any]) -> None:
            ok = isinstance(reply, StoreAppendRawReply)
            telemetry.end_span(span, "" if ok else "store_append_refused")
            if epoch != self._epoch:
                return
            if isinstance(reply, StoreAppendRawReply):
                if self.store_refusal:
                    log.warning("own store takes the master's bytes again at %d", self.applied)
                    self.store_refusal = ""
                self.applied = reply.next_offset
                self._transfer(epoch)
                return
            why = _describe(reply)
            # once per episode: a full disk is asked again every RETRY_S until space is freed
            if not self.store_refusal:
                log.error("own store refused the master's bytes at %d: %s", body.from_offset, why)
            self.store_refusal = why
            self._retry(RETRY_S)

        self.store.request(
            StoreAppendRawRequest(body.from_offset), on_append, [data], timeout_s=STORE_TIMEOUT_S
        )


def _describe(body: AnyReply) -> str:
    if isinstance(body, ErrorReply):
        return f"[{body.code}] {body.message}"
    return type(body).__name__
