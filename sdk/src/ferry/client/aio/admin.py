"""Admin for asyncio: the sync Admin's operations, each run in a worker thread.

An admin operation is often several requests with logic between them (cluster info, then
every master, then merged replies); running the sync Admin's own code keeps one definition
of each and its errors. Admin calls are rare, so the thread hop costs nothing that matters.
Any other operation of ferry.client.Admin is reachable with `await admin.call(fn)`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Self, TypeVar

from ferry.client.admin import Admin as SyncAdmin
from ferry.client.consume_progress import GroupLag, QueueProgress
from ferry.client.message import MessageQueue
from ferry.protocol.auth import Credentials
from ferry.protocol.codes import Perm
from ferry.protocol.messages import ClusterInfoReply, QueueStat, TopicRouteData

T = TypeVar("T")


class Admin:
    def __init__(
        self,
        namesrv: str,
        *,
        timeout_ms: int = 3000,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        self._admin = SyncAdmin(
            namesrv, timeout_ms=timeout_ms, credentials=credentials, tls_server_key=tls_server_key
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

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    # ---- the common operations, typed ----

    async def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = Perm.READ_WRITE,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        return await self._run(
            self._admin.create_topic,
            topic,
            read_queue_nums,
            write_queue_nums,
            perm,
            cluster=cluster,
            broker_addr=broker_addr,
        )

    async def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        await self._run(self._admin.delete_topic, topic, cluster)

    async def topic_list(self) -> list[str]:
        return await self._run(self._admin.topic_list)

    async def topic_route(self, topic: str) -> TopicRouteData:
        return await self._run(self._admin.topic_route, topic)

    async def topic_stats(self, topic: str) -> dict[str, list[QueueStat]]:
        return await self._run(self._admin.topic_stats, topic)

    async def cluster_info(self) -> ClusterInfoReply:
        return await self._run(self._admin.cluster_info)

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        return await self._run(self._admin.master_addrs, cluster)

    async def queues(self, topic: str) -> list[MessageQueue]:
        return await self._run(self._admin.queues, topic)

    async def max_offset(self, queue: MessageQueue) -> int:
        return await self._run(self._admin.max_offset, queue)

    async def min_offset(self, queue: MessageQueue) -> int:
        return await self._run(self._admin.min_offset, queue)

    async def consumer_offset(self, group: str, queue: MessageQueue) -> int | None:
        return await self._run(self._admin.consumer_offset, group, queue)

    async def update_consumer_offset(self, group: str, queue: MessageQueue, offset: int) -> None:
        await self._run(self._admin.update_consumer_offset, group, queue, offset)

    async def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        return await self._run(self._admin.search_offset, queue, timestamp_ms)

    async def consumer_progress(self, group: str, topic: str) -> list[QueueProgress]:
        return await self._run(self._admin.consumer_progress, group, topic)

    async def consumer_groups(self, topic: str) -> list[str]:
        return await self._run(self._admin.consumer_groups, topic)

    async def group_lags(self, topic: str | None = None) -> list[GroupLag]:
        return await self._run(self._admin.group_lags, topic)
