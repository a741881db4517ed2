"""QueryRoute's queues: a topic's route from the name servers (the SDK's route table, filled
on zmq.asyncio as ferry.client.aio's clients fill theirs), each queue shown on the proxy.

Every QueryRoute asks the name servers: clients ask once at start and then every 30 s, and
the answer then tells a client at once of a queue count changed, a broker gone or back."""

from __future__ import annotations

from ferry.client.aio.instance import AsyncRoutes
from ferry.client.aio.transport import AsyncPool
from ferry.client.route import TopicRoute, parse_namesrv
from ferry.protocol.auth import Credentials
from ferry.proxy.convert import RouteQueue
from ferry.proxy.protocol import Permission

ROUTE_TIMEOUT_S = 3.0


def route_queues(route: TopicRoute, accepted: tuple[int, ...]) -> list[RouteQueue]:
    """The queues of `route` by broker name and id, each with the permission its broker
    gives it (writable: its broker has a live master)."""
    writable = {(q.broker_name, q.queue_id) for q in route.write_queues}
    readable = {(q.broker_name, q.queue_id) for q in route.read_queues}
    queues = []
    for broker, queue_id in sorted(writable | readable):
        key = (broker, queue_id)
        if key in writable and key in readable:
            permission = Permission.READ_WRITE
        elif key in writable:
            permission = Permission.WRITE
        else:
            permission = Permission.READ
        queues.append(RouteQueue(broker, queue_id, permission, accepted))
    return queues


class RouteLookup:
    """Asks the name servers for topics' routes; started and closed on the proxy's loop."""

    def __init__(
        self,
        namesrv: str,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        self._addrs = parse_namesrv(namesrv)
        self._credentials = credentials
        self._key = tls_server_key
        self._pool: AsyncPool | None = None
        self._routes: AsyncRoutes | None = None

    def start(self) -> None:
        self._pool = AsyncPool(credentials=self._credentials, tls_server_key=self._key)
        self._routes = AsyncRoutes(self._addrs, self._pool, ROUTE_TIMEOUT_S)

    async def route(self, topic: str) -> TopicRoute:
        """The topic's route now; TopicNotExistError when no broker serves it."""
        if self._routes is None:
            raise RuntimeError("RouteLookup is not started")
        return await self._routes.fetch_route(topic)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
