"""What every asyncio client needs once: connections, routes, periodic tasks, its identity.

Routes are the sync SDK's RouteTable, filled here by asking the name servers on zmq.asyncio;
the sync code that reads them (Publisher, rebalancing) never fetches: callers `await ensure()`
first.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ferry.client.aio.transport import AsyncConnection, AsyncPool
from ferry.client.instance import ClientBase
from ferry.client.route import RouteTable, TopicRoute
from ferry.client.transport import Result
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import FerryError, IllegalStateError, TopicNotExistError
from ferry.protocol.messages import AnyRequest, GetRouteInfoRequest, Reply, RouteInfoReply

log = logging.getLogger("ferry.client.aio")

R = TypeVar("R", bound=Reply)


class AsyncRoutes(RouteTable):
    """A RouteTable whose owner fetches routes over zmq.asyncio."""

    def __init__(self, namesrv_addrs: list[str], pool: AsyncPool, timeout_s: float) -> None:
        super().__init__(namesrv_addrs)
        self._pool = pool
        self._timeout_s = timeout_s

    async def namesrv_request(self, body: AnyRequest, cls: type[R]) -> R:
        """Asks the name servers in turn, as RouteCache.namesrv_request does."""
        errors: list[tuple[str, FerryError]] = []
        for index, addr in self.namesrv_order():
            reply = self.namesrv_outcome(index, await self._ask(addr, body), errors, cls)
            if reply is not None:
                return reply
        raise self.none_answered(errors)

    async def _ask(self, addr: str, body: AnyRequest) -> Result | FerryError:
        try:
            return await self._pool.get(addr).request(body, timeout_s=self._timeout_s)
        except FerryError as err:
            return err

    async def fetch_route(self, topic: str) -> TopicRoute:
        """Asks the name servers now; TopicNotExistError when no broker serves the topic."""
        try:
            reply = await self.namesrv_request(GetRouteInfoRequest(topic=topic), RouteInfoReply)
        except TopicNotExistError:
            self.forget(topic)
            raise
        return self.learn(topic, reply.route)

    async def ensure(self, topic: str) -> TopicRoute:
        """The route get() will give without fetching."""
        return self.fresh(topic) or await self.fetch_route(topic)

    async def refresh_all(self) -> None:
        """Periodic refresh; a failure keeps the old route."""
        for topic in self.topics():
            try:
                await self.fetch_route(topic)
            except FerryError as err:
                log.info("route refresh of %s: %s", topic, err)


class AsyncClientInstance(ClientBase):
    """Built by a client's start() inside the running loop, closed by its shutdown()."""

    routes: AsyncRoutes

    def _open(
        self, addrs: list[str], role: str, credentials: Credentials | None, key: str | None
    ) -> None:
        self.pool = AsyncPool(self._on_notice, credentials, key)
        self.routes = AsyncRoutes(addrs, self.pool, self.api_timeout_s)
        self.tracing.refresh()
        self._tasks: set[asyncio.Task[None]] = set()

    def connection(self, address: str) -> AsyncConnection:
        return self.pool.get(address)

    def every(self, period_s: float, job: Callable[[], Awaitable[None]]) -> None:
        """Runs `job` every period_s until close(); a failure is logged, the next runs."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(period_s)
                try:
                    await job()
                except Exception:
                    log.exception("periodic task of %s failed", self.client_id)

        self.spawn(loop())

    def spawn(self, work: Awaitable[None]) -> None:
        """A background task of this client, cancelled by close()."""
        if self.pool.closed:
            if inspect.iscoroutine(work):
                work.close()  # never run: no "was never awaited" warning
            raise IllegalStateError("client is shut down")
        # the coroutine itself is the task: a task cancelled before it ran closes it
        # (a wrapper cancelled first would leave `work` never awaited)
        if inspect.iscoroutine(work):
            task = asyncio.create_task(work)
        else:
            task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.pool.close()
