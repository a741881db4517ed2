"""Metadata from master to slave (RocketMQ's SlaveSynchronize).

A slave's remoting asks its master's, every slaveSynchronizeInterval, for topics,
subscription groups and consumer offsets, and copies them. It finds the master (broker id 0 of
its brokerName) through the name servers, so a master that is gone is simply not asked.

Consumers commit offsets to the slave while the master is gone (the SDK sends commits where
it reads). Those commits are journaled and handed to the master with the next sync, which
keeps the larger of its own offset and the slave's: commits made during an outage outlive it.

The master's scheduler progress (delay level offsets, timer progress, its restart scan point)
comes with each sync and goes to the slave's scheduler, which keeps it as its own: a slave
restarted as master resumes the delay levels where the master's scheduler had saved them
(RocketMQ syncs delayOffset.json the same way).

Users and ACLs come with each sync too (get_auth_snapshot, sent only when the master's differ
from the slave's copy): the slave saves and serves them as its own (auth_admin.py). With
authentication on they travel sealed with the inner secret key; a slave configured with
another inner key cannot open them: it logs why (throttled) and keeps the copy it has.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from ferry.protocol.errors import FerryError
from ferry.protocol.messages import (
    AnyReply,
    AuthSnapshotReply,
    ClusterInfoReply,
    ErrorReply,
    GetAuthSnapshotRequest,
    GetClusterInfoRequest,
    SlaveSyncReply,
    SlaveSyncRequest,
    SyncedGroup,
    SyncedOffset,
)
from ferry.remoting.auth_admin import AuthAdmin
from ferry.remoting.calls import Caller
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.scheduler_link import SchedulerLink
from ferry.remoting.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupTable
from ferry.remoting.topic_table import TopicTable
from ferry.runtime.service import Peer, Service
from ferry.runtime.throttled_log import ThrottledLog

log = logging.getLogger("ferry.remoting.slave_sync")

MASTER_ID = 0
REQUEST_TIMEOUT_S = 5.0


class SlaveSynchronizer:
    """The slave's side: finds the master and copies its metadata on a period."""

    def __init__(
        self,
        service: Service,
        broker_name: str,
        namesrv_addrs: list[str],
        topics: TopicTable,
        groups: SubscriptionGroupTable,
        offsets: ConsumerOffsetTable,
        scheduler: SchedulerLink,
        master_endpoint: str = "",
        auth: AuthAdmin | None = None,
    ) -> None:
        self._service = service
        self._scheduler = scheduler
        self._auth = auth
        # where the master's remoting is reached when its advertised address is not (containers)
        self._master_endpoint = master_endpoint
        self._broker_name = broker_name
        self._namesrvs = [
            service.connect_peer(f"tcp://{a}", REQUEST_TIMEOUT_S) for a in namesrv_addrs
        ]
        self._next_namesrv = 0
        self._masters: dict[str, Peer] = {}
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        offsets.journal = {}
        self.master_addr = ""
        self.syncs = 0
        self._busy = False
        # the same failure comes back at every sync: a line or two a minute says it
        self._auth_failures = ThrottledLog(log, interval_s=60.0, burst=2)

    def start(self, interval_s: float) -> None:
        self._service.every(interval_s, self.sync, first_s=min(interval_s, 1.0))

    def sync(self) -> None:
        if self._busy or not self._namesrvs:
            return
        self._busy = True
        peer = self._namesrvs[self._next_namesrv % len(self._namesrvs)]
        self._next_namesrv += 1
        peer.request(GetClusterInfoRequest(), self._on_cluster_info)

    def _on_cluster_info(self, body: AnyReply, _frames: list[Any]) -> None:
        master = ""
        if isinstance(body, ClusterInfoReply):
            data = body.brokers.get(self._broker_name)
            master = data.broker_addrs.get(MASTER_ID, "") if data is not None else ""
        if not master:
            self._busy = False  # no master in the route (gone): keep what we have
            return
        if master != self.master_addr:
            log.info("master of %s is %s: syncing metadata from it", self._broker_name, master)
            self.master_addr = master
        endpoint = self._master_endpoint or f"tcp://{master}"
        peer = self._masters.get(endpoint)
        if peer is None:
            peer = self._masters[endpoint] = self._service.connect_peer(endpoint)
        journal = self._offsets.journal or {}
        sent = dict(journal)
        request = SlaveSyncRequest(
            broker_name=self._broker_name,
            offsets=[SyncedOffset(g, t, q, o) for (g, t, q), o in sent.items()],
        )
        peer.request(
            request,
            lambda reply, frames: self._on_sync(reply, sent),
            timeout_s=REQUEST_TIMEOUT_S,
        )
        if self._auth is not None:
            known = GetAuthSnapshotRequest(known_digest=self._auth.known_digest())
            peer.request(known, self._on_auth, timeout_s=REQUEST_TIMEOUT_S)

    def _on_auth(self, body: AnyReply, _frames: list[Any]) -> None:
        assert self._auth is not None
        if not isinstance(body, AuthSnapshotReply):
            message = body.message if isinstance(body, ErrorReply) else type(body).__name__
            self._auth_failures.warning(
                "users and ACLs not synced from %s: %s", self.master_addr, message
            )
            return
        try:
            self._auth.adopt(body)
        except FerryError as err:  # the old copy stays in force
            self._auth_failures.error(
                "users and ACLs from %s not taken (this broker keeps its copy): %s",
                self.master_addr,
                err,
            )

    def _on_sync(self, body: AnyReply, sent: dict[tuple[str, str, int], int]) -> None:
        self._busy = False
        if not isinstance(body, SlaveSyncReply):
            message = body.message if isinstance(body, ErrorReply) else type(body).__name__
            log.warning("metadata sync from %s failed: %s", self.master_addr, message)
            return
        journal = self._offsets.journal
        if journal is not None:
            for key, offset in sent.items():
                if journal.get(key) == offset:  # the master has it now
                    del journal[key]
        wanted = {t.topic_name for t in body.topics}
        for topic in body.topics:
            self._topics.put(topic)  # no-op when unchanged
        for config in self._topics.all():
            if config.topic_name not in wanted:
                self._topics.remove(config.topic_name)
        for g in body.groups:
            group = SubscriptionGroupConfig(
                group_name=g.group_name,
                consume_enable=g.consume_enable,
                consume_broadcast_enable=g.consume_broadcast_enable,
                retry_queue_nums=g.retry_queue_nums,
                retry_max_times=g.retry_max_times,
                consume_message_orderly=g.consume_message_orderly,
            )
            if self._groups.find(g.group_name) != group:
                self._groups.put(group)
        pending = journal or {}
        for entry in body.offsets:
            if (entry.group, entry.topic, entry.queue_id) not in pending:
                self._offsets.put_synced(entry.group, entry.topic, entry.queue_id, entry.offset)
        if body.scheduler is not None:
            self._scheduler.adopt(body.scheduler)
        self.syncs += 1


class MasterSyncProcessor:
    """The master's side: merges a slave's commits (forward only), answers its metadata and
    its scheduler's progress."""

    def __init__(
        self,
        topics: TopicTable,
        groups: SubscriptionGroupTable,
        offsets: ConsumerOffsetTable,
        scheduler: SchedulerLink,
    ) -> None:
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._scheduler = scheduler

    def handle(self, req: SlaveSyncRequest, call: Caller) -> None:
        for entry in req.offsets:
            mine = self._offsets.get(entry.group, entry.topic, entry.queue_id)
            if mine is None or entry.offset > mine:
                self._offsets.commit(entry.group, entry.topic, entry.queue_id, entry.offset)
        # the metadata as it is now; the scheduler's progress when it answers (or without)
        reply = self._metadata()
        self._scheduler.progress(
            lambda progress: call.reply(msgspec.structs.replace(reply, scheduler=progress))
        )

    def _metadata(self) -> SlaveSyncReply:
        return SlaveSyncReply(
            topics=self._topics.all(),
            groups=[
                SyncedGroup(
                    group_name=g.group_name,
                    consume_enable=g.consume_enable,
                    consume_broadcast_enable=g.consume_broadcast_enable,
                    retry_queue_nums=g.retry_queue_nums,
                    retry_max_times=g.retry_max_times,
                    consume_message_orderly=g.consume_message_orderly,
                )
                for g in self._groups.all()
            ],
            offsets=[SyncedOffset(g, t, q, o) for g, t, q, o in self._offsets.entries()],
        )
