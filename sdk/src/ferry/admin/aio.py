"""Admin for asyncio (also reachable as ferry.client.aio.Admin): the sync Admin's operations,
each run in a worker thread.

An admin operation is often several requests with logic between them (cluster info, then
every master, then merged replies); running the sync Admin's own code keeps one definition
of each and its errors. Admin calls are rare, so the thread hop costs nothing that matters.
The common operations are the sync Admin's own methods made coroutines (aio.threaded: the
same parameters and docstrings); any other is reachable with `await admin.call(fn)`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Self, TypeVar

from ferry.admin.admin import Admin as SyncAdmin
from ferry.admin.options import AdminOptions
from ferry.client.aio.threaded import threaded

T = TypeVar("T")


class Admin(AdminOptions):
    """Options: see AdminOptions."""

    @functools.cached_property
    def _admin(self) -> SyncAdmin:
        """The sync Admin whose code the operations run (made on first use)."""
        return SyncAdmin(
            self.namesrv,
            timeout_ms=self._timeout_ms,
            credentials=self.credentials,
            tls_server_key=self.tls_server_key,
        )

    async def start(self) -> None:
        await asyncio.to_thread(self._admin.start)

    async def shutdown(self) -> None:
        await asyncio.to_thread(self._admin.shutdown)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.shutdown()

    async def call(self, fn: Callable[[SyncAdmin], T]) -> T:
        """Runs fn(sync admin) in a worker thread: any ferry.admin.Admin operation."""
        return await asyncio.to_thread(fn, self._admin)

    # ---- the common operations, typed ----

    def _sync(self) -> SyncAdmin:
        return self._admin

    create_topic = threaded(SyncAdmin.create_topic, _sync)

    async def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        await asyncio.to_thread(self._admin.delete_topic, topic, cluster)

    topic_list = threaded(SyncAdmin.topic_list, _sync)
    topic_route = threaded(SyncAdmin.topic_route, _sync)
    topic_stats = threaded(SyncAdmin.topic_stats, _sync)
    cluster_info = threaded(SyncAdmin.cluster_info, _sync)
    master_addrs = threaded(SyncAdmin.master_addrs, _sync)
    queues = threaded(SyncAdmin.queues, _sync)
    max_offset = threaded(SyncAdmin.max_offset, _sync)
    min_offset = threaded(SyncAdmin.min_offset, _sync)
    consumer_offset = threaded(SyncAdmin.consumer_offset, _sync)
    update_consumer_offset = threaded(SyncAdmin.update_consumer_offset, _sync)
    search_offset = threaded(SyncAdmin.search_offset, _sync)
    consumer_progress = threaded(SyncAdmin.consumer_progress, _sync)
    consumer_groups = threaded(SyncAdmin.consumer_groups, _sync)
    group_lags = threaded(SyncAdmin.group_lags, _sync)
