"""`ferry serve <service>`: one service (or the whole broker group) from a broker.conf.

ferry.runtime and the services (the `ferry[server]` extra) are imported when it runs."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from ferry.cli.output import EXIT_USAGE, fail
from ferry.cli.server import require_server
from ferry.protocol.errors import FerryError

BROKER_GROUP = (
    "broker-store",
    "index",
    "scheduler",
    "checkback",
    "ha-replicator",
    "broker-remoting",
    "broker-agent",  # controller mode's
)


def serve(
    service: Annotated[
        str,
        typer.Argument(
            metavar="SERVICE",
            help="namesrv | broker | broker-store | broker-remoting | "
            "ha-replicator | index | scheduler | checkback | controller | proxy",
        ),
    ],
    conf: Annotated[Path | None, typer.Option("-c", "--conf", help="broker.conf")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="override one broker.conf key"),
    ] = None,
) -> None:
    """Run a service in the foreground (`broker` runs the broker group's services together),
    restarting it when it exits (FERRY_RESTART_POLICY; `off`: no restarts)."""
    overrides = set_ or []
    if service == "broker":
        require_server("ferry serve broker", BROKER_GROUP)
        _serve_broker(conf, overrides)
        return
    require_server(f"ferry serve {service}", ())
    from ferry.runtime.launcher import MODULES

    module = MODULES.get(service)
    if module is None:
        fail(f"unknown service {service!r}")
        raise typer.Exit(EXIT_USAGE)
    require_server(f"ferry serve {service}", (service,))
    args = ["-c", str(conf)] if conf else []
    for item in overrides:
        args += ["--set", item]
    _serve_one(service, module, args)


def on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (Ctrl-C): the supervisor's cue to stop.

    The handler only writes a byte to a pipe, and a thread of its own sets the event.
    Event.set() in the handler itself deadlocks when the signal lands while the main thread
    holds that event's lock, in its own stop.wait(): a handler runs on the main thread."""
    stop = threading.Event()
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def on_signal(_signum: int, _frame: Any) -> None:
        with contextlib.suppress(BlockingIOError):  # full of earlier signals: set already
            os.write(write_fd, b"\0")

    def set_on_signal() -> None:
        os.read(read_fd, 1)
        stop.set()

    threading.Thread(target=set_on_signal, name="signals", daemon=True).start()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def tree_supervisor(cluster: Any, say: Callable[[str], None]) -> Any:
    """The Supervisor of a command's process tree, its lines prefixed `[supervisor]`."""
    from ferry.runtime.supervisor import Supervisor

    return Supervisor(
        cluster,
        say=lambda message: say(f"[supervisor] {message}"),
        error=lambda message: fail(f"[supervisor] {message}"),
    )


def supervise(
    cluster: Any,
    stop: threading.Event,
    say: Callable[[str], None],
    supervisor: Any = None,
    channel: Any = None,
) -> None:
    """Restarts cluster's services that exit until `stop` is set, then stops them all;
    exits 1 if every service was given up on. supervisor: one made already (tree_supervisor);
    channel: the tree's channel to its broker agent (controller mode), stopped after them."""
    if supervisor is None:
        supervisor = tree_supervisor(cluster, say)
    try:
        kept = supervisor.run(stop)
    finally:
        cluster.stop()  # the agent first: it was started last
        if channel is not None:
            channel.stop()
    if not kept:
        raise typer.Exit(1)


def _serve_one(service: str, module: str, args: list[str]) -> None:
    """One service as a child process, restarted when it exits; its output is ours, as is:
    its READY line is this command's."""
    from ferry.runtime.launcher import LaunchError, LineRelay, LocalCluster, start_service
    from ferry.runtime.supervisor import RestartPolicy

    relay = LineRelay()
    try:
        policy = RestartPolicy.from_env()
    except FerryError as err:
        fail(str(err))
        raise typer.Exit(EXIT_USAGE) from None
    if not policy.restart:  # restarted from outside: be the service, with no process above it
        os.execv(sys.executable, [sys.executable, "-m", module, *args])
    stop = on_signals()
    try:
        sp = start_service(
            service,
            args,
            sink=lambda _name, line: relay.write(line),
            stderr=None,  # its errors (a bad key: exit 2) reach the user as they are
            ready_timeout=policy.ready_timeout,
        )
    except LaunchError as err:
        if err.exit_code is None:
            fail(str(err))
        raise typer.Exit(err.exit_code if err.exit_code and err.exit_code > 0 else 1) from None
    supervise(LocalCluster([sp]), stop, relay.write)


def _serve_broker(conf: Path | None, overrides: list[str]) -> None:
    from ferry.runtime.config import BrokerConfig, load_config, parse_overrides
    from ferry.runtime.launcher import LineRelay, LocalCluster, start_broker_services
    from ferry.runtime.supervisor import RestartPolicy

    relay = LineRelay()
    channel = None
    try:
        parsed = parse_overrides(overrides)
        config = load_config(BrokerConfig, conf, parsed)
        RestartPolicy.from_env()  # a bad FERRY_RESTART_POLICY fails before anything starts
        stop = on_signals()
        cluster = LocalCluster()
        controlled = config.enable_controller_mode
        start_broker_services(
            cluster,
            str(config.store_root),
            namesrv_addr=config.namesrv_addr,
            broker_port=config.listen_port,
            conf_file=str(conf) if conf else None,
            # every replica starts as a slave; the agent knows
            overrides={**parsed, "brokerRole": "SLAVE"} if controlled else parsed,
            sink=relay.service_line,
            store_endpoint=config.store_endpoint or "tcp://127.0.0.1:0",
        )
        supervisor = tree_supervisor(cluster, relay.write)
        if controlled:
            channel = _start_agent(cluster, supervisor, config, conf, parsed, relay)
    except FerryError as err:
        fail(str(err))
        raise typer.Exit(1) from None
    rocketmq = f" rocketmq={cluster.broker_rocketmq_addr}" if cluster.broker_rocketmq_addr else ""
    relay.write(f"READY broker addr={cluster.broker_addr} ha={cluster.ha_addr}{rocketmq}")
    supervise(cluster, stop, relay.write, supervisor, channel)


def _start_agent(
    cluster: Any,
    supervisor: Any,
    config: Any,
    conf: Path | None,
    parsed: dict[str, str],
    relay: Any,
) -> Any:
    """The tree's channel, and the broker agent on it (its lines prefixed `[agent]`); returns
    the channel."""
    from ferry.runtime.security import settings
    from ferry.runtime.tree_channel import TreeChannel, start_agent

    settings.configure(config)  # the channel checks requests as the tree's services do
    channel = TreeChannel(cluster, supervisor)
    try:
        start_agent(
            cluster,
            supervisor,
            channel.start(),
            conf_file=str(conf) if conf else None,
            overrides=parsed,  # its brokerRole: what the replica serves as master
            sink=lambda _name, line: relay.service_line("agent", line),
        )
    except BaseException:
        channel.stop()
        raise
    return channel
