"""`ferry-proxy` / `python -m ferry.proxy` (`ferry serve proxy`, mqproxy): -c proxy.conf,
--set key=value (namesrvAddr, listenHost, proxyListenPort, maxMessageSize, and the cluster's
security keys: authenticationEnabled, authorizationEnabled,
innerClientAuthenticationCredentials, tlsEnable with tlsServerKeyFile, tlsInternalKeyFile,
tlsServerCertPath and tlsServerKeyPath)."""

from __future__ import annotations

from collections.abc import Sequence

# first: importing the generated gRPC modules reconfigures logging (ferry.proxy.protocol)
from ferry.proxy.app import SERVICE_NAME, ListenError, ProxyApp
from ferry.runtime.cli import run_service
from ferry.runtime.config import ProxyConfig

PROG = "ferry-proxy"


def _cannot_listen(config: ProxyConfig, exc: Exception) -> str:
    return f"cannot listen on {config.listen_host}:{config.proxy_listen_port}: {exc}"


def main(argv: Sequence[str] | None = None) -> None:
    run_service(
        PROG,
        SERVICE_NAME,
        ProxyConfig,
        lambda config: ProxyApp(config).run(),
        argv,
        expected=(ListenError,),
        explain=_cannot_listen,
        description="RocketMQ 5's gRPC protocol (MessagingService) for RocketMQ 5 clients",
    )


if __name__ == "__main__":
    main()
