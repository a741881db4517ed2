"""The broker-store service's composition root: a MessageStore wired to the request loop, the
dispatch feed (dispatch_feed.py), puts (put_handler.py), gets and long polling
(get_handlers.py), lookups (query_handlers.py), flushing (commit_service.py), retention
(retention_duties.py), mqadmin (admin_handlers.py) and replication (replica_handlers.py)."""

from __future__ import annotations

import logging
import resource

from ferry import native
from ferry.protocol.messages import (
    CleanExpiredConsumeQueueRequest,
    DeleteExpiredCommitLogRequest,
    GrantWriteLeaseRequest,
    QueryConsumeQueueRequest,
    SearchOffsetByTimestampRequest,
    StoreAppendRawRequest,
    StoreConfirmOffsetRequest,
    StoreDeleteTopicRequest,
    StoreGetRequest,
    StoreLogDigestRequest,
    StorePutRequest,
    StoreQueueOffsetsRequest,
    StoreReadLogRequest,
    StoreReadRawRequest,
    StoreStatusRequest,
    StoreUpdateConfigRequest,
    ViewMessageRequest,
)
from ferry.runtime import metrics
from ferry.runtime.config import BrokerConfig
from ferry.runtime.lease import Lease
from ferry.runtime.service import Service, announce_ready
from ferry.runtime.version import package_version
from ferry.store.admin_handlers import StoreAdminHandlers
from ferry.store.commit_service import CommitService
from ferry.store.dispatch_feed import DispatchFeed
from ferry.store.get_handlers import GetHandlers
from ferry.store.property_filter import warm_sql_filters
from ferry.store.put_handler import PutHandler
from ferry.store.query_handlers import QueryHandlers
from ferry.store.replica_handlers import ReplicaHandlers
from ferry.store.retention_duties import RetentionDuties
from ferry.store.store import MessageStore
from ferry.store.store_metrics import StoreMetrics

log = logging.getLogger("ferry.store.app")

SERVICE_NAME = "broker-store"
POLL_SWEEP_S = 0.05  # how often held gets are checked for expiry
OPEN_FILES_WANTED = 65_536  # when the hard limit is unlimited
DISK_CHECK_S = 1.0  # how often the disk's used ratio is measured (the write guard)


def default_endpoints(config: BrokerConfig) -> tuple[str, str]:
    """storeEndpoint and storeFeedEndpoint, or ipc sockets under <root>/run by default."""
    return (
        config.store_endpoint or config.run_endpoint("store.sock"),
        config.store_feed_endpoint or config.run_endpoint("feed.sock"),
    )


class StoreApp:
    """Builds the store's handlers and background duties once and hands them to the service;
    the store does the work."""

    def __init__(self, config: BrokerConfig, store: MessageStore, service: Service) -> None:
        self.config = config
        self.store = store
        self.service = service
        self.feed = DispatchFeed(store, service)
        self._commit = CommitService(config, store, service)
        if metrics.enabled():
            StoreMetrics(store, self._commit.flusher)
        slave = config.broker_role == "SLAVE"
        # controller mode: a master appends only under the agent's write lease (lease.py)
        self.lease = Lease(config.enable_controller_mode and not slave)
        if config.enable_property_filter:
            warm_sql_filters()
        # allAckInSyncStateSet: a put wakes no reader; remoting's confirm of it does
        gated = config.reads_gated
        if gated:
            store.gate_reads()
        self._closed = False
        self.gets = GetHandlers(store, gated)
        puts = PutHandler(
            config, store, self._commit, self.lease, self.gets.wake, self.feed.publish
        )
        service.on(StorePutRequest, puts.put)
        service.on(StoreGetRequest, self.gets.get)
        queries = QueryHandlers(store, self._commit)
        service.on(StoreQueueOffsetsRequest, queries.queue_offsets)
        service.on(StoreReadLogRequest, queries.read_log)
        service.on(StoreStatusRequest, queries.status)
        service.on(SearchOffsetByTimestampRequest, queries.search_offset)
        service.on(ViewMessageRequest, queries.view_message)
        service.on(QueryConsumeQueueRequest, queries.query_cq)
        retention = RetentionDuties(store, self._commit)
        service.on(DeleteExpiredCommitLogRequest, retention.delete_expired)
        service.on(StoreConfirmOffsetRequest, self.gets.confirm)
        service.on(GrantWriteLeaseRequest, puts.grant)
        # mqadmin: deleteTopic, cleanExpiredCQ, live retention keys
        admin = StoreAdminHandlers(store, self._commit.quiesce, config)
        service.on(StoreDeleteTopicRequest, admin.delete_topic)
        service.on(CleanExpiredConsumeQueueRequest, admin.clean_expired)
        service.on(StoreUpdateConfigRequest, admin.update_config)
        # HA: raw log reads (master), raw appends (slave), digests
        replica = ReplicaHandlers(store, slave, self.feed.publish, self.gets.wake)
        service.on(StoreReadRawRequest, replica.read_raw)
        service.on(StoreAppendRawRequest, replica.append_raw)
        service.on(StoreLogDigestRequest, replica.digest)
        service.every(POLL_SWEEP_S, self.gets.expire_polls)
        service.every(DISK_CHECK_S, retention.check_disk)
        service.every(config.clean_resource_interval / 1000, retention.clean)
        service.on_stop(self.close)

    def bind(self) -> tuple[str, str]:
        """Binds the request ROUTER and the feed PUB; returns the endpoints actually bound."""
        endpoint, feed_endpoint = default_endpoints(self.config)
        bound = self.service.bind_router(endpoint)
        return bound, self.feed.bind(feed_endpoint)

    def close(self) -> None:
        """Clean stop: answer held gets and waiting puts, flush, close the store."""
        if self._closed:
            return
        self._closed = True
        self.gets.close()
        try:
            self._commit.close()
        finally:
            self.store.close()


def run(config: BrokerConfig) -> None:
    """Opens the store (recovery), binds, prints READY and serves until stopped."""
    raise_open_files_limit()
    store = MessageStore.open(config)
    service = Service(
        SERVICE_NAME,
        max_deferred=config.max_pending_requests,
        version=package_version("ferry-broker-store"),
    )
    app = StoreApp(config, store, service)
    try:
        endpoint, feed = app.bind()
    except BaseException:
        app.close()
        service.ctx.destroy(linger=0)
        raise
    announce_ready(SERVICE_NAME, endpoint=endpoint, feed=feed)
    log.info("store serving on %s; per-record loops in %s", endpoint, native.describe())
    service.run()


def raise_open_files_limit() -> None:
    """Every ConsumeQueue file keeps a descriptor open: thousands of queues need more than the
    usual soft limit of 1024, so take what the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open files limit from %d: %s", soft, exc)
