"""The store's dispatch feed (an XPUB): after each append, a notice of the log range with its
records for the ha-replicator (FEED_TOPIC), and notices alone for followers that read the log
files themselves (NOTICE_TOPIC: the index, the scheduler). Each kind goes out only while
someone subscribes to it, and is dropped rather than ever blocking the store."""

from __future__ import annotations

import logging
from typing import Any

import zmq

from ferry.protocol.frames import NOBLOCK, recv_ready, send_frames
from ferry.protocol.messages import DispatchNotice
from ferry.runtime.service import Service
from ferry.store.store import MessageStore

log = logging.getLogger("ferry.store.app")

FEED_TOPIC = b"dispatch"  # [topic, notice, the records]
NOTICE_TOPIC = b"notice"  # [topic, notice]: for followers that read the log files themselves
FEED_HWM = 1000  # notices queued per subscriber before the feed drops them
# Notices alone (the index reads the log files, on a 20 ms timer) go out at most this often,
# adjacent ranges as one: a notice per put woke the index's I/O thread once per sync send,
# on the 2 cores the send path needs. Records (the HA feed) still go out at once.
NOTICE_DELAY_S = 0.005


class DispatchFeed:
    def __init__(self, store: MessageStore, service: Service) -> None:
        self.store = store
        self.service = service
        self._feed: zmq.Socket[Any] | None = None
        self._subscriptions: dict[bytes, int] = {}  # topic prefix -> subscribers
        self._send_records = self._send_notices = False
        self._notice_range: list[int] | None = None  # [start, stop) not announced yet

    def bind(self, feed_endpoint: str) -> str:
        """Binds the feed's PUB; returns the endpoint actually bound."""
        # Notices carry whole batches: a stalled subscriber may pin FEED_HWM of them, no more
        # (it catches up with StoreReadLogRequest).
        self._feed, bound_feed = self.service.bind_pub(feed_endpoint, hwm=FEED_HWM, xpub=True)
        self.service.add_reader(self._feed, self._on_subscriptions)
        return bound_feed

    def _on_subscriptions(self, sock: zmq.Socket[Any]) -> None:
        """The feed publishes a kind of message only while someone subscribes to it: copying
        every batch's records into a message nobody reads costs as much as sending it."""
        while (frames := recv_ready(sock)) is not None:
            msg = frames[0]
            if msg[:1] not in (b"\x00", b"\x01"):
                continue
            count = self._subscriptions.get(msg[1:], 0) + (1 if msg[0] else -1)
            self._subscriptions[msg[1:]] = max(count, 0)
        wanted = [t for t, n in self._subscriptions.items() if n]
        self._send_records = any(FEED_TOPIC.startswith(t) for t in wanted)
        self._send_notices = any(NOTICE_TOPIC.startswith(t) for t in wanted)

    def publish(self, start: int, stop: int, written: bytearray | None = None) -> None:
        """Dispatch feed: a hint for subscribers, dropped rather than ever blocking the store.
        `written`: the bytes of [start, stop) as the append wrote them, if it has them."""
        if self._feed is None or stop <= start:
            return
        if self._send_notices:
            held = self._notice_range
            if held is None:
                self._notice_range = [start, stop]
                self.service.later(NOTICE_DELAY_S, self._send_notice)
            elif held[1] == start:
                held[1] = stop
            else:  # not adjacent (a truncated log): what was held goes first; the timer
                self._send_notice()  # already set sends this one
                self._notice_range = [start, stop]
        if not self._send_records:
            return
        notice = self.service.codec.encode(DispatchNotice(start, stop))
        self.service.used(self._feed)  # the XPUB's subscriptions come in on it too
        records = written if written is not None else self.store.log_slice(start, stop)
        try:
            send_frames(self._feed, [FEED_TOPIC, notice, records], NOBLOCK, False)
        except zmq.ZMQError as exc:
            log.debug("dispatch notice dropped: %s", exc)

    def _send_notice(self) -> None:
        held, self._notice_range = self._notice_range, None
        if held is None or self._feed is None:
            return
        self.service.used(self._feed)
        try:
            notice = self.service.codec.encode(DispatchNotice(held[0], held[1]))
            send_frames(self._feed, [NOTICE_TOPIC, notice], NOBLOCK)
        except zmq.ZMQError as exc:
            log.debug("dispatch notice dropped: %s", exc)
