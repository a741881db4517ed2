"""A master's users and ACLs, pushed to every name server and controller (authentication on).

They check signatures and ACLs with what masters push (ferry.runtime.security.mirror). A push
goes out soon after a change (CHANGE_CHECK_S) and every REFRESH_S anyway, so a name server
or controller that restarted knows the users again within seconds. The snapshot travels
sealed with the cluster's inner secret key: no password crosses the wire in clear.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import msgspec

from ferry.protocol.auth import Credentials, seal
from ferry.protocol.messages import AnyReply, ErrorReply, PushAuthSnapshotRequest
from ferry.runtime.acl import AuthDb
from ferry.runtime.service import Payload, Service
from ferry.runtime.throttled_log import ThrottledLog

log = logging.getLogger("ferry.remoting.auth_push")

CHANGE_CHECK_S = 0.5
REFRESH_S = 5.0
PUSH_TIMEOUT_S = 3.0


class AuthPusher:
    def __init__(
        self,
        service: Service,
        db: AuthDb,
        broker_name: str,
        cluster: str,
        addrs: Sequence[str],
        inner: Credentials,
        *,
        is_master: Callable[[], bool],
    ) -> None:
        self._db = db
        self._broker_name = broker_name
        self._cluster = cluster
        self._inner = inner
        self._is_master = is_master
        self._peers = [service.connect_peer(f"tcp://{a}", PUSH_TIMEOUT_S) for a in addrs]
        self._encoder = msgspec.msgpack.Encoder()
        self._pushed_version = -1
        self._pushed_at = 0.0
        self._failures = ThrottledLog(log)
        service.every(CHANGE_CHECK_S, self.tick, first_s=0.0)

    def tick(self) -> None:
        if not self._peers or not self._is_master():
            return
        version = self._db.version
        now = time.monotonic()
        if version == self._pushed_version and now - self._pushed_at < REFRESH_S:
            return
        self._pushed_version, self._pushed_at = version, now
        sealed = seal(self._inner.secret_key, self._encoder.encode(self._db.snapshot()))
        req = PushAuthSnapshotRequest(self._broker_name, version, sealed, self._cluster)
        for peer in self._peers:
            peer.request(req, self._on_reply(peer.endpoint))

    def _on_reply(self, endpoint: str) -> Callable[[AnyReply, Payload], None]:
        def on_reply(reply: AnyReply, _payload: Payload) -> None:
            if isinstance(reply, ErrorReply):
                # the refresh (REFRESH_S) tries again
                self._failures.warning("pushing users to %s failed: %s", endpoint, reply.message)

        return on_reply
