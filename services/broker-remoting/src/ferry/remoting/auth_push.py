"""A master's users and ACLs, pushed to every name server and controller (authentication on).

They check signatures and ACLs with what masters push (ferry.runtime.security.mirror). A
change is pushed at once (confirm), and the admin command that made it is answered only when
every name server and controller took it, or CONFIRM_S passed (the answer then names those
that did not): a new user's first request after its grant is not refused (issue 42 §8). A
push goes out every REFRESH_S anyway, so a name server or controller that restarted knows the
users again within seconds. The snapshot travels sealed with the cluster's inner secret key:
no password crosses the wire in clear.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import msgspec

from ferry.protocol.auth import Credentials, seal
from ferry.protocol.messages import AnyReply, ErrorReply, OkReply, PushAuthSnapshotRequest
from ferry.runtime.acl import AuthDb
from ferry.runtime.service import Payload, Peer, Service
from ferry.runtime.throttled_log import ThrottledLog

log = logging.getLogger("ferry.remoting.auth_push")

CHANGE_CHECK_S = 0.5
REFRESH_S = 5.0
PUSH_TIMEOUT_S = 3.0
# how long an admin change waits for the name servers and controllers to take it
CONFIRM_S = 1.5  # well within an admin call's timeout (3 s by default)

Done = Callable[[list[str]], None]


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
        kinds: Sequence[str] = (),
    ) -> None:
        self._db = db
        self._broker_name = broker_name
        self._cluster = cluster
        self._inner = inner
        self._is_master = is_master
        self._peers = [service.connect_peer(f"tcp://{a}", PUSH_TIMEOUT_S) for a in addrs]
        # what an unconfirmed change names each by: "name server 127.0.0.1:9876"
        self._labels = {
            p.endpoint: f"{kinds[i]} {a}" if i < len(kinds) else a
            for i, (p, a) in enumerate(zip(self._peers, addrs, strict=True))
        }
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
        self._push(None)

    def confirm(self, done: Done) -> None:
        """Pushes the users now; done(labels of the servers that had not taken them within
        CONFIRM_S), called once, from the loop."""
        if not self._peers or not self._is_master():
            done([])
            return
        self._push(done)

    def _push(self, done: Done | None) -> None:
        version = self._db.version
        self._pushed_version, self._pushed_at = version, time.monotonic()
        sealed = seal(self._inner.secret_key, self._encoder.encode(self._db.snapshot()))
        req = PushAuthSnapshotRequest(self._broker_name, version, sealed, self._cluster)
        waiting = _Waiting(len(self._peers), done)
        for peer in self._peers:
            peer.request(req, self._on_reply(peer, waiting), timeout_s=CONFIRM_S)

    def _on_reply(self, peer: Peer, waiting: _Waiting) -> Callable[[AnyReply, Payload], None]:
        label = self._labels.get(peer.endpoint, peer.endpoint)

        def on_reply(reply: AnyReply, _payload: Payload) -> None:
            if isinstance(reply, ErrorReply):
                # the refresh (REFRESH_S) tries again
                self._failures.warning("pushing users to %s failed: %s", label, reply.message)
            waiting.answered(label, isinstance(reply, OkReply))

        return on_reply


class _Waiting:
    """One push's answers; done(the labels that did not take it) once all have answered (a
    peer that does not answer is answered by its request's timeout, CONFIRM_S)."""

    def __init__(self, count: int, done: Done | None) -> None:
        self._left = count
        self._missing: list[str] = []
        self._done = done

    def answered(self, label: str, ok: bool) -> None:
        if not ok:
            self._missing.append(label)
        self._left -= 1
        if self._left == 0 and self._done is not None:
            done, self._done = self._done, None
            done(sorted(self._missing))
