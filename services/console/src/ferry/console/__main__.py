"""`ferry-console [-n NAMESRV] [--host H] [--port P] [--data-dir D] [--access-key A
--secret-key S] [--tls-server-key F] [--auth-required auto|true|false] [-c file] [--set k=v]`."""

from __future__ import annotations

from collections.abc import Sequence

from ferry.console.app import SERVICE_NAME, ConsoleApp
from ferry.console.config import ConsoleConfig
from ferry.runtime.cli import Flag, run_service

PROG = "ferry-console"
FLAGS = (
    Flag(("-n", "--namesrv"), "namesrvAddr", "name server(s), host:port;... (namesrvAddr)"),
    Flag(("--host",), "listenHost", "listen host (listenHost, default 127.0.0.1)"),
    Flag(("--port",), "listenPort", "listen port, 0 = any free (listenPort, 8080)", int),
    Flag(("--data-dir",), "consoleDataDir", "where the trace store lives (consoleDataDir)"),
    Flag(("--access-key",), "accessKey", "the cluster's credentials for the console's sampler"),
    Flag(("--secret-key",), "secretKey", "... their secret (FERRY_SECRET_KEY keeps it off ps)"),
    Flag(("--tls-server-key",), "tlsServerKey", "with tlsEnable, the cluster's server.key"),
    Flag(("--auth-required",), "authRequired", "pages ask for a login: auto, true or false"),
)


def _cannot_serve(config: ConsoleConfig, exc: Exception) -> str:
    return f"cannot serve on {config.listen_host}:{config.listen_port}: {exc}"


def main(argv: Sequence[str] | None = None) -> None:
    run_service(
        PROG,
        SERVICE_NAME,
        ConsoleConfig,
        lambda config: ConsoleApp(config).run(),
        argv,
        expected=(OSError,),
        explain=_cannot_serve,
        flags=FLAGS,
        description="Ferry's web console",
        allocator_thresholds=False,  # a web page server: the allocator's defaults suit it
    )


if __name__ == "__main__":
    main()
