"""Services as child processes: started by module (`python -m ferry.store`), never imported
here; their READY line awaited, their output relayed, and a clean stop."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from ferry.protocol.errors import FerryError

MODULES = {
    "namesrv": "ferry.namesrv",
    "broker-store": "ferry.store",
    "broker-remoting": "ferry.remoting",
    "index": "ferry.index",
    "ha-replicator": "ferry.ha",
    "console": "ferry.console",
    "scheduler": "ferry.scheduler",
    "checkback": "ferry.scheduler.checkback",
    "controller": "ferry.controller",
    # RocketMQ 5's gRPC protocol for RocketMQ 5 clients, stateless, beside the name servers
    "proxy": "ferry.proxy",
    # controller mode's broker side, a process of each `ferry serve broker` tree
    "broker-agent": "ferry.controller.agent",
    # a whole broker group as one process tree (`ferry serve broker`): a replica of controller
    # mode, whose loss models a lost machine; started with ["serve", "broker", …]
    "broker": "ferry.cli",
}

LineSink = Callable[[str, str], None]


class LineRelay:
    """One writer for the lines of several services and of the command that started them
    (`ferry dev up`, `ferry serve broker`): whole lines under one lock, so lines of different
    services never merge mid-line, each prefixed with its service's name.

    A service's own `READY <name> k=v…` line is relayed as `[<name>] listening k=v…`: the word
    READY is left to the command's own line (the cluster's), so that `grep READY` finds that
    one, printed once everything is up, and not a service's, seconds earlier."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def service_line(self, name: str, line: str) -> None:
        """A LineSink: one line a service printed (`READY <its name> k=v…` once)."""
        if line.startswith("READY "):
            line = "listening " + line.split(" ", 2)[-1] if line.count(" ") > 1 else "listening"
        self.write(f"[{name}] {line.replace('READY', 'ready')}")

    def write(self, line: str) -> None:
        """One line of the command's own."""
        stream = self._stream or sys.stdout
        with self._lock:
            stream.write(line + "\n")
            stream.flush()


class LaunchError(FerryError):
    """A service that exited or stayed silent before printing READY."""

    exit_code: int | None = None  # the service's, when it exited (it said why on stderr)


@dataclass
class ServiceProcess:
    name: str
    proc: subprocess.Popen[str]
    endpoints: dict[str, str] = field(default_factory=dict)
    output: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=400))
    pump: threading.Thread | None = None
    # how it was started, so that a supervisor can start it again the same way
    args: list[str] = field(default_factory=list)
    env: Mapping[str, str] | None = None
    sink: LineSink | None = None
    stderr: int | None = subprocess.STDOUT
    label: str = ""  # its name in the output when it differs (the slave group's)
    announced: bool = False  # printed its READY line
    ready: threading.Event = field(default_factory=threading.Event)  # READY or EOF

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def display(self) -> str:
        return self.label or self.name

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM, without waiting (stop() then waits): several processes stop together."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited within timeout; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close_output()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: the crash that recovery must survive."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._close_output()

    def _close_output(self) -> None:
        # The reader thread ends at EOF once the process is gone; then the pipe can be closed.
        if self.pump is not None and self.pump is not threading.current_thread():
            self.pump.join(5)
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            self.proc.stdout.close()

    def recent_output(self) -> str:
        return "\n".join(self.output)


def start_service(
    name: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 30.0,
    sink: LineSink | None = None,
    stderr: int | None = subprocess.STDOUT,
) -> ServiceProcess:
    """Starts a service and waits for its READY line (LaunchError if it exits or stays
    silent). stderr=None leaves its stderr on ours instead of merging it into its output."""
    sp = spawn_service(name, args, env=env, sink=sink, stderr=stderr)
    wait_ready(sp, ready_timeout)
    return sp


def spawn_service(
    name: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    sink: LineSink | None = None,
    stderr: int | None = subprocess.STDOUT,
) -> ServiceProcess:
    """Starts a service without waiting: its output is read by a thread, which sets
    `announced` (and fills `endpoints`) at its READY line."""
    module = MODULES.get(name)
    if module is None:
        raise LaunchError(f"unknown service {name!r}; known: {', '.join(sorted(MODULES))}")
    child_env = dict(os.environ if env is None else env)
    child_env["FERRY_PARENT_PID"] = str(os.getpid())
    child_env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        text=True,
        env=child_env,
        bufsize=1,
    )
    sp = ServiceProcess(name, proc, args=list(args), env=env, sink=sink, stderr=stderr)

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            sp.output.append(line)
            if not sp.announced and line.startswith(f"READY {name}"):
                for part in line.split()[2:]:
                    key, _, value = part.partition("=")
                    sp.endpoints[key] = value
                sp.announced = True
                sp.ready.set()
            if sink is not None:
                sink(name, line)
        sp.ready.set()  # EOF: wake the waiter, who sees the process gone

    sp.pump = threading.Thread(target=pump, name=f"pump-{name}", daemon=True)
    sp.pump.start()
    return sp


def wait_ready(sp: ServiceProcess, ready_timeout: float = 30.0) -> None:
    """Waits for sp's READY line; kills it and raises LaunchError if it exits first or
    stays silent past ready_timeout."""
    deadline = time.monotonic() + ready_timeout
    while not sp.ready.wait(0.05):
        if time.monotonic() > deadline:
            sp.kill()
            raise LaunchError(
                f"{sp.name} printed no READY line in {ready_timeout:.0f}s:\n{sp.recent_output()}"
            )
    if not sp.announced:
        sp.proc.wait(5)
        sp._close_output()
        err = LaunchError(
            f"{sp.name} exited with {sp.proc.returncode} before READY:\n{sp.recent_output()}"
        )
        err.exit_code = sp.proc.returncode
        raise err


def service_args(conf_file: str | None, overrides: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    if conf_file:
        args += ["-c", conf_file]
    for key, value in overrides.items():
        args += ["--set", f"{key}={value}"]
    return args
