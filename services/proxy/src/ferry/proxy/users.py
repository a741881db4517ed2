"""The users and ACLs the proxy checks gRPC calls against, pulled from the masters.

The proxy is one more reader of what every master's remoting already hands out: the sealed
snapshot of its users and ACLs (GetAuthSnapshotRequest, as a slave asks its master), which
only the cluster's inner credentials may ask for and open. We pull rather than wait for the
masters' pushes (name servers and controllers get those): the masters need no list of
proxies, and several proxies may come and go. The name servers say which masters there are
(GetClusterInfoRequest); each is asked every PULL_S with the digest of what the proxy holds,
so an unchanged snapshot costs a few bytes. The snapshots go into Ferry's AuthMirror, the
same holder the name servers check requests against.

Staleness: a user, password or ACL changed on a master is seen by the proxy within PULL_S
plus one request timeout (PULL_TIMEOUT_S), about 3 s. A master that cannot be reached keeps
its last snapshot in force until it answers again (a deleted user can sign until then, but
without that master nothing it owns can be sent or received either). The first pull happens
before the proxy serves, so a user known to the masters at start is known at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ferry.client.aio.instance import AsyncRoutes
from ferry.client.aio.transport import AsyncPool
from ferry.client.route import parse_namesrv
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import (
    AuthSnapshotReply,
    ClusterInfoReply,
    GetAuthSnapshotRequest,
    GetClusterInfoRequest,
    PushAuthSnapshotRequest,
)
from ferry.runtime.security.mirror import AuthMirror
from ferry.runtime.throttled_log import ThrottledLog

log = logging.getLogger("ferry.proxy.users")

PULL_S = 2.0
PULL_TIMEOUT_S = 1.0


class UserPuller:
    """Fills an AuthMirror from the masters' snapshots; started and closed on the loop."""

    def __init__(self, namesrv: str, inner: Credentials, tls_server_key: str | None) -> None:
        self.mirror = AuthMirror(inner)
        self._addrs = parse_namesrv(namesrv)
        self._inner = inner
        self._key = tls_server_key
        self._pool: AsyncPool | None = None
        self._routes: AsyncRoutes | None = None
        self._digests: dict[str, str] = {}  # broker name -> digest of the snapshot held
        self._task: asyncio.Task[None] | None = None
        self._failures = ThrottledLog(log)

    async def start(self) -> None:
        """The first pull (its failures logged), then one every PULL_S."""
        self._pool = AsyncPool(credentials=self._inner, tls_server_key=self._key)
        self._routes = AsyncRoutes(self._addrs, self._pool, PULL_TIMEOUT_S)
        await self.pull()
        self._task = asyncio.create_task(self._every(), name="ferry-proxy-users")

    async def _every(self) -> None:
        while True:
            await asyncio.sleep(PULL_S)
            await self.pull()

    async def pull(self) -> None:
        assert self._routes is not None
        try:
            info = await self._routes.namesrv_request(GetClusterInfoRequest(), ClusterInfoReply)
        except FerryError as err:
            self._failures.warning("users not pulled: no cluster info: %s", err)
            return
        masters = [
            (name, data.broker_addrs[0], data.cluster)
            for name, data in sorted(info.brokers.items())
            if 0 in data.broker_addrs
        ]
        await asyncio.gather(*(self._pull_one(*m) for m in masters))

    async def _pull_one(self, broker_name: str, addr: str, cluster: str) -> None:
        assert self._pool is not None
        ask = GetAuthSnapshotRequest(known_digest=self._digests.get(broker_name, ""))
        try:
            reply, _ = await self._pool.get(addr).request(ask, timeout_s=PULL_TIMEOUT_S)
            if not isinstance(reply, AuthSnapshotReply):
                raise FerryError(f"{type(reply).__name__} instead of the users")
            if not reply.sealed:
                return  # unchanged since our digest (or the master has authentication off)
            push = PushAuthSnapshotRequest(broker_name, reply.version, reply.sealed, cluster)
            self.mirror.push(push, None)
        except FerryError as err:  # the last snapshot stays in force
            self._failures.warning("users of %s not pulled from %s: %s", broker_name, addr, err)
            return
        self._digests[broker_name] = reply.digest
        log.info("users of %s pulled (auth version %d)", broker_name, reply.version)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._pool is not None:
            await self._pool.close()
