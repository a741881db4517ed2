"""Composition root of the ha-replicator: on a master, the slaves' endpoint (haListenPort),
the store's feed and the SYNC_MASTER waits; on a slave, the link to the master. Both answer
HaStatusRequest on their endpoint."""

from __future__ import annotations

import logging
import signal
from typing import Any

import msgspec
import zmq

from ferry.ha.config import HaConfig
from ferry.ha.ha_metrics import HaMetrics
from ferry.ha.master import MasterReplicator
from ferry.ha.slave import SlaveReplicator
from ferry.protocol.errors import ServiceNotAvailableError
from ferry.protocol.frames import recv_ready
from ferry.protocol.framing import DECODE_FAILURES
from ferry.protocol.messages import (
    DispatchNotice,
    HaHelloRequest,
    HaStatusReply,
    HaStatusRequest,
    HaTransferRequest,
    HaWaitAckRequest,
)
from ferry.runtime import metrics
from ferry.runtime.service import DRAIN_BATCH, Call, HandlerResult, Service, announce_ready
from ferry.runtime.version import package_version

log = logging.getLogger("ferry.ha")

SERVICE_NAME = "ha-replicator"
FEED_TOPIC = b"dispatch"
FEED_HWM = 1000
STATUS_INTERVAL_S = 1.0  # the master re-reads its store's log bounds (lost feed notices)
SWEEP_S = 0.05  # expiry of held transfers and SYNC_MASTER waits (their precision)


class HaApp:
    def __init__(self, config: HaConfig) -> None:
        self.config = config
        self.service = Service(
            SERVICE_NAME,
            max_deferred=config.max_pending_requests,
            version=package_version("ferry-ha-replicator"),
        )
        self.store = self.service.connect_peer(config.store_endpoint)
        self.master: MasterReplicator | None = None
        self.slave: SlaveReplicator | None = None
        self._feed: zmq.Socket[Any] | None = None
        self._notices = msgspec.msgpack.Decoder(DispatchNotice)
        self.service.on(HaStatusRequest, self._status)
        if config.is_slave:
            self.service.on(HaWaitAckRequest, self._not_a_master)
        else:
            self.master = MasterReplicator(config, self.service, self.store, self._follow_feed)
            sessions = self.master.sessions
            self.service.on(HaHelloRequest, sessions.hello)
            self.service.on(HaTransferRequest, sessions.transfer)
            self.service.on(HaWaitAckRequest, self.master.wait_ack)
            feed = self.service.ctx.socket(zmq.SUB)
            feed.linger = 0
            self.service.secure_client(feed)
            feed.rcvhwm = FEED_HWM
            feed.connect(config.store_feed_endpoint)  # subscribed while a slave is attached
            self._feed = feed
            # woken by the feed itself: a SYNC_MASTER send waits on this hop
            self.service.add_reader(feed, self._drain_feed)
            self.service.every(STATUS_INTERVAL_S, sessions.refresh, first_s=0)
            self.service.every(SWEEP_S, self.master.sweep)
            self.service.on_stop(self.master.close)

    def run(self) -> None:
        endpoint = self.service.bind_router(self.config.listen_endpoint())
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda _signum, _frame: self.service.stop())
        port = endpoint.rpartition(":")[2]
        addr = f"{self.config.advertised_host}:{port}"
        role = self.config.broker_role
        announce_ready(SERVICE_NAME, endpoint=endpoint, addr=addr, role=role)
        if self.config.is_slave and not self.config.ha_master_address:
            # controller mode: no master known yet; the broker agent restarts this service
            # with haMasterAddress once the controller names one
            log.info("slave of %s: waiting to be told its master", self.config.broker_name)
        elif self.config.is_slave:
            self.slave = SlaveReplicator(self.config, self.service, self.store, addr)
            self.slave.start()
            self.service.on_stop(self.slave.stop)
            log.info(
                "slave of %s: replicating from %s", self.config.broker_name, self.slave.master_addr
            )
        else:
            log.info("%s of %s: slaves connect to %s", role, self.config.broker_name, addr)
        if metrics.enabled():
            HaMetrics(self.master, self.slave)
        self.service.run()

    def _follow_feed(self, on: bool) -> None:
        # notices published before the store learns of the subscription are missed: the
        # feed cache starts over at the first one, older bytes are read from the store
        assert self._feed is not None
        self._feed.setsockopt(zmq.SUBSCRIBE if on else zmq.UNSUBSCRIBE, FEED_TOPIC)
        log.info("dispatch feed %s", "followed: a slave is attached" if on else "left: no slave")

    def _drain_feed(self, sock: zmq.Socket[Any]) -> None:
        assert self.master is not None
        sessions = self.master.sessions
        for _ in range(DRAIN_BATCH):
            frames = recv_ready(sock)
            if frames is None:
                break
            if len(frames) != 3 or frames[0] != FEED_TOPIC:
                continue
            try:
                notice = self._notices.decode(frames[1])
            except DECODE_FAILURES as exc:
                self.service.bad_input.warning("undecodable dispatch notice ignored: %s", exc)
                continue
            sessions.on_feed(notice.from_offset, notice.next_offset, frames[2])
        sessions.feed_drained()

    def _status(self, _req: HaStatusRequest, _call: Call) -> HaStatusReply:
        if self.master is not None:
            return HaStatusReply(
                role=self.config.broker_role,
                master_max_offset=self.master.log_end,
                slaves=self.master.status(),
            )
        slave = self.slave
        if slave is None:
            return HaStatusReply(role=self.config.broker_role)
        return HaStatusReply(
            role=self.config.broker_role,
            master_max_offset=slave.master_max,
            master_ha_addr=slave.master_addr,
            connected=slave.connected,
            applied_offset=slave.applied,
            bytes_received=slave.bytes_received,
            error=slave.error,
            diverged_from=slave.diverged_from,
            store_refusal=slave.store_refusal,
        )

    def _not_a_master(self, _req: HaWaitAckRequest, _call: Call) -> HandlerResult:
        raise ServiceNotAvailableError("this ha-replicator serves a SLAVE")
