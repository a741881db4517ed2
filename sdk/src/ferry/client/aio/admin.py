"""Admin for asyncio: the sync Admin's operations, each run in a worker thread.

An admin operation is often several requests with logic between them (cluster info, then
every master, then merged replies); running the sync Admin's own code keeps one definition
of each and its errors. Admin calls are rare, so the thread hop costs nothing that matters.
The common operations are the sync Admin's own methods made coroutines (_threaded: the same
parameters and docstrings); any other is reachable with `await admin.call(fn)`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from ferry.client.admin import Admin as SyncAdmin
from ferry.client.admin_options import AdminOptions

P = ParamSpec("P")
T = TypeVar("T")


def _threaded(
    op: Callable[Concatenate[SyncAdmin, P], T],
) -> Callable[Concatenate[Admin, P], Coroutine[Any, Any, T]]:
    """The sync Admin's operation as a coroutine method that runs it in a worker thread."""

    async def run(admin: Admin, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(op, admin._admin, *args, **kwargs)

    functools.update_wrapper(run, op)
    return run


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
        """Runs fn(sync admin) in a worker thread: any ferry.client.Admin operation."""
        return await asyncio.to_thread(fn, self._admin)

    # ---- the common operations, typed ----

    create_topic = _threaded(SyncAdmin.create_topic)

    async def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        await asyncio.to_thread(self._admin.delete_topic, topic, cluster)

    topic_list = _threaded(SyncAdmin.topic_list)
    topic_route = _threaded(SyncAdmin.topic_route)
    topic_stats = _threaded(SyncAdmin.topic_stats)
    cluster_info = _threaded(SyncAdmin.cluster_info)
    master_addrs = _threaded(SyncAdmin.master_addrs)
    queues = _threaded(SyncAdmin.queues)
    max_offset = _threaded(SyncAdmin.max_offset)
    min_offset = _threaded(SyncAdmin.min_offset)
    consumer_offset = _threaded(SyncAdmin.consumer_offset)
    update_consumer_offset = _threaded(SyncAdmin.update_consumer_offset)
    search_offset = _threaded(SyncAdmin.search_offset)
    consumer_progress = _threaded(SyncAdmin.consumer_progress)
    consumer_groups = _threaded(SyncAdmin.consumer_groups)
    group_lags = _threaded(SyncAdmin.group_lags)
