"""Starts the peer brokers on loopback (free ports, data in a temp dir) and stops them by pid.

Each server runs in its own session, so a Ctrl-C in the terminal reaches only the harness,
which then stops every server it started (SIGTERM to the server's process group, whose id is
the pid we started, then SIGKILL). A server that does not come up raises PeerStartError with
the tail of its log; the harness reports that peer as not started and goes on.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

RABBIT_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")  # not /usr/sbin's, which su's


class PeerStartError(RuntimeError):
    """A peer that is not installed, exited, or did not answer in time."""


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range: a port the kernel handed out
    (bind to 0) can be taken again by any outgoing connection before the server binds it,
    which once kept RabbitMQ from starting (could_not_start_listener)."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(max(1024, low - 12_000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise PeerStartError("no free loopback port below the ephemeral range")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        # Helpers the server forked into its group (Erlang's port programs) go with it.
        _signal_group(self.proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@dataclass
class Servers:
    """Everything started in this run, stopped in reverse order."""

    root: Path
    started: list[Server] = field(default_factory=list)
    stoppers: list[Callable[[], None]] = field(default_factory=list)

    def spawn(
        self, name: str, argv: Sequence[str], port: int, env: Mapping[str, str] | None = None
    ) -> Server:
        if shutil.which(argv[0]) is None:
            raise PeerStartError(f"{argv[0]} is not installed (make bench-peers installs it)")
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                cwd=self.root,
                start_new_session=True,
            )
        server = Server(name, proc, port, log)
        self.started.append(server)
        return server

    def stop_all(self) -> None:
        for stop in reversed(self.stoppers):
            try:
                stop()
            except Exception as err:  # noqa: BLE001 - stopping the rest matters more
                print(f"(stopping: {err})")
        self.stoppers.clear()
        for server in reversed(self.started):
            server.stop()
        self.started.clear()


def wait_ready(server: Server, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise PeerStartError(
                f"{server.name} exited with {server.proc.returncode}:\n{server.tail()}"
            )
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not answering yet
            pass
        time.sleep(0.1)  # between readiness checks, bounded by the deadline
    server.stop()
    raise PeerStartError(f"{server.name} not ready in {timeout:.0f}s:\n{server.tail()}")


def start_redis(servers: Servers) -> Server:
    import redis

    port = free_port()
    data = servers.root / "redis"
    data.mkdir()
    argv = [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
        "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
        "--daemonize", "no", "--protected-mode", "no",
    ]  # fmt: skip
    server = servers.spawn("redis", argv, port)
    client = redis.Redis(port=port, socket_timeout=1)
    wait_ready(server, lambda: bool(client.ping()), 30)
    client.close()
    return server


def start_nats(servers: Servers) -> Server:
    port = free_port()
    data = servers.root / "nats"
    data.mkdir()
    argv = ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(data)]
    server = servers.spawn("nats", argv, port)
    wait_ready(server, lambda: "Server is ready" in server.tail(50), 30)
    return server


def start_rabbitmq(servers: Servers, attempts: int = 3) -> Server:
    """The Erlang node itself with its own epmd, config, logs and Mnesia under the temp dir.
    Schedulers do not busy-wait (+sbwt none), so an idle RabbitMQ leaves the 2 shared cores
    to the system being measured. A node that finds one of its ports taken starts again on
    new ones."""
    if not RABBIT_SCRIPT.exists():
        raise PeerStartError("rabbitmq-server is not installed (make bench-peers installs it)")
    for attempt in range(1, attempts + 1):
        try:
            return _start_rabbitmq(servers, servers.root / f"rabbitmq-{attempt}")
        except PeerStartError as err:
            taken = "could_not_start_listener" in str(err) or "eaddrinuse" in str(err)
            if not taken or attempt == attempts:
                raise
            print(f"(rabbitmq: a port was taken, starting again on others: attempt {attempt + 1})")
    raise AssertionError("unreachable")


def _start_rabbitmq(servers: Servers, data: Path) -> Server:
    import pika

    data.mkdir()
    epmd_port, port, dist_port = free_port(), free_port(), free_port()
    epmd = servers.spawn(
        "epmd", ["epmd", "-address", "127.0.0.1", "-port", str(epmd_port)], epmd_port
    )
    conf = data / "rabbitmq.conf"
    conf.write_text(
        f"listeners.tcp.default = 127.0.0.1:{port}\n"
        "loopback_users = none\n"
        "log.console = false\n"
        "log.file.level = warning\n"
    )
    (data / "enabled_plugins").write_text("[].\n")
    (data / "rabbitmq-env.conf").write_text("")
    env = {
        "HOME": str(data),
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_NODENAME": "ferrybench@localhost",
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_CONFIG_FILE": str(conf),
        "RABBITMQ_CONF_ENV_FILE": str(data / "rabbitmq-env.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(data / "enabled_plugins"),
        "RABBITMQ_MNESIA_BASE": str(data / "mnesia"),
        "RABBITMQ_LOG_BASE": str(data / "log"),
        "RABBITMQ_PID_FILE": str(data / "rabbit.pid"),
        "RABBITMQ_PLUGINS_EXPAND_DIR": str(data / "plugins-expand"),
        "RABBITMQ_FEATURE_FLAGS_FILE": str(data / "feature_flags"),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": (
            "-start_epmd false +sbwt none +sbwtdcpu none +sbwtdio none"
        ),
    }
    wait_ready(epmd, lambda: _connects(epmd_port), 15)
    server = servers.spawn("rabbitmq", [str(RABBIT_SCRIPT)], port, env)
    params = pika.ConnectionParameters("127.0.0.1", port, socket_timeout=2)

    def check() -> bool:
        pika.BlockingConnection(params).close()
        return True

    wait_ready(server, check, 120)
    return server


def _connects(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
