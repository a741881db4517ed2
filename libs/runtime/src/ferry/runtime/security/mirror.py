"""The users a name server or controller checks requests against: what masters pushed.

Each master's remoting pushes its users and ACLs (PushAuthSnapshotRequest), sealed with the
inner secret key. Masters of different broker groups keep their own users, as in RocketMQ
(createUser -c CLUSTER reaches every master); a user is looked up in the first group, by
broker name, that knows it, and that group's ACL decides.
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec

from ferry.protocol.auth import Credentials, unseal
from ferry.protocol.errors import BadSignatureError, InvalidParameterError
from ferry.protocol.messages import AnyReply, AuthSnapshot, OkReply, PushAuthSnapshotRequest
from ferry.runtime.acl import AuthDb


class AuthMirror:
    def __init__(self, inner: Credentials) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        # broker name -> (version, users, cluster)
        self._groups: dict[str, tuple[int, AuthDb, str]] = {}
        self._decoder = msgspec.msgpack.Decoder(AuthSnapshot)

    def push(self, req: PushAuthSnapshotRequest, _call: Any) -> AnyReply:
        plain = unseal(self._inner.secret_key, req.sealed)
        if plain is None:
            raise BadSignatureError("the pushed users are not sealed with this cluster's key")
        try:
            snapshot = self._decoder.decode(plain)
        except msgspec.MsgspecError as exc:
            raise InvalidParameterError(f"the pushed users do not decode: {exc}") from None
        with self._lock:
            held = self._groups.get(req.broker_name)
            if held is None or held[0] != req.version:
                self._groups[req.broker_name] = (req.version, AuthDb(snapshot), req.cluster)
        return OkReply()

    def _holder(self, username: str) -> tuple[AuthDb, Any, str] | None:
        with self._lock:
            groups = sorted(self._groups.items())
        for _name, (_version, db, cluster) in groups:
            user = db.user(username)
            if user is not None:
                return db, user, cluster
        return None

    def user(self, username: str) -> Any:
        held = self._holder(username)
        return None if held is None else held[1]

    def cluster_of(self, username: str) -> str:
        """The cluster of the broker group whose users hold this one ("" unknown)."""
        held = self._holder(username)
        return "" if held is None else held[2]

    def authorize(self, username: str, resource: Any, action: Any, source_ip: str) -> str | None:
        held = self._holder(username)
        if held is None:
            return f"user {username!r} is not known here"
        return held[0].authorize(username, resource, action, source_ip)
