"""An admin's options, checked once: the sync Admin's, and those of ferry.admin.aio's Admin
(which runs a sync Admin made from them)."""

from __future__ import annotations

from ferry.client.route import parse_namesrv
from ferry.protocol.auth import Credentials


class AdminOptions:
    def __init__(
        self,
        namesrv: str,
        *,
        timeout_ms: int = 3000,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        parse_namesrv(namesrv)
        self.namesrv = namesrv
        self.credentials = credentials
        self.tls_server_key = tls_server_key
        self._timeout_ms = timeout_ms
        self._timeout_s = timeout_ms / 1000
