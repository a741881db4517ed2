"""CURVE on a service's sockets (tlsEnable): the server side, and the ZAP check of who connects.

Every bound socket encrypts with the cluster's server key pair. Client ports (remoting, name
server, controller) admit any client key: who may do what is the request signatures' and the
ACLs' business. Internal ports (store, index, scheduler, check-back, HA) and every feed admit
only the cluster's internal key, so a process without it cannot even connect, let alone read
a feed, whatever host it runs on.
"""

from __future__ import annotations

import logging
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from ferry.protocol.curve import CurveClient

log = logging.getLogger("ferry.security.curve")

CLIENTS_DOMAIN = "clients"
INTERNAL_DOMAIN = "internal"


class _Admit:
    """A ZAP credentials provider: which client keys a domain admits."""

    def __init__(self, only: bytes | None) -> None:
        self._only = only  # z85 public key; None: any

    def callback(self, domain: str, client_key: bytes) -> bool:
        ok = self._only is None or client_key == self._only
        if not ok:
            log.warning("refused a CURVE connection to an internal port from an unknown key")
        return ok


class CurveServer:
    """A context's CURVE: its ZAP handler (a thread), and the options of bound sockets."""

    def __init__(
        self, ctx: zmq.Context[Any], server_pair: tuple[bytes, bytes], internal_public: bytes
    ) -> None:
        self._public, self._secret = server_pair
        self._auth = ThreadAuthenticator(ctx, log=logging.getLogger("ferry.security.zap"))
        self._auth.start()
        self._auth.configure_curve_callback(CLIENTS_DOMAIN, _Admit(None))
        self._auth.configure_curve_callback(INTERNAL_DOMAIN, _Admit(internal_public))

    def serve(self, sock: zmq.Socket[Any], *, internal: bool) -> None:
        """Before bind: this socket encrypts, and admits per its domain."""
        sock.zap_domain = (INTERNAL_DOMAIN if internal else CLIENTS_DOMAIN).encode()
        sock.curve_server = True
        sock.curve_publickey = self._public
        sock.curve_secretkey = self._secret

    def stop(self) -> None:
        self._auth.stop()


def internal_client(server_public: bytes, internal_pair: tuple[bytes, bytes]) -> CurveClient:
    return CurveClient(server_public, internal_pair[0], internal_pair[1])
