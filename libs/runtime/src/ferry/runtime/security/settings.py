"""The process's security settings, set once by its main() from its config (cli.run_service).

Every Service the process makes reads them: its outgoing requests are signed with the inner
credentials, and its guard checks what comes in. A process that never configures (a unit test
building a Service) runs without security.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferry.protocol.auth import Credentials
from ferry.runtime.security.config import SecurityConfig
from ferry.runtime.security.guard import Guard

if TYPE_CHECKING:
    import zmq

    from ferry.protocol.curve import CurveClient
    from ferry.runtime.security.curve import CurveServer
    from ferry.runtime.security.mirror import AuthMirror

# the ports users may reach; every other service is internal to its broker
CLIENT_FACING = frozenset({"broker-remoting", "namesrv", "controller"})
# ... and those that learn the users from the masters' pushes
MIRRORS = frozenset({"namesrv", "controller"})

_config: SecurityConfig | None = None
_cluster = ""


def configure(config: object) -> None:
    """Takes the security keys of any service config that has them."""
    global _config, _cluster
    _config = config if isinstance(config, SecurityConfig) else None
    _cluster = str(getattr(config, "broker_cluster_name", ""))


def reset() -> None:
    configure(None)


def inner_credentials() -> Credentials | None:
    """What this process's requests to other services are signed with (None: unsigned)."""
    if _config is None or not _config.authentication_enabled:
        return None
    return _config.inner_credentials()


def tls_enabled() -> bool:
    return _config is not None and _config.tls_enable


def curve_client() -> CurveClient | None:
    """How this process's services connect to others with tlsEnable (the internal key)."""
    if _config is None or not _config.tls_enable:
        return None
    from ferry.runtime.security.curve import internal_client

    return internal_client(_config.server_key_pair()[0], _config.internal_key_pair())


def curve_server(ctx: zmq.Context[Any]) -> CurveServer | None:
    """A context's CURVE server side with tlsEnable: its ZAP handler starts now."""
    if _config is None or not _config.tls_enable:
        return None
    from ferry.runtime.security.curve import CurveServer

    return CurveServer(ctx, _config.server_key_pair(), _config.internal_key_pair()[0])


def guard_for(service: str) -> Guard | None:
    if _config is None or not _config.authentication_enabled:
        return None
    inner = _config.inner_credentials()
    assert inner is not None  # check_security() requires them with authentication
    return Guard(
        service,
        inner=inner,
        authorization=_config.authorization_enabled,
        internal_only=service not in CLIENT_FACING,
        cluster=_cluster,
    )


def mirror() -> AuthMirror:
    from ferry.runtime.security.mirror import AuthMirror

    inner = inner_credentials()
    assert inner is not None
    return AuthMirror(inner)
