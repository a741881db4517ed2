"""An etcd of Ferry's own: a child process on free ports with its own data dir.

For the tests and `ferry dev up --ha`: never the system's etcd (Debian's `etcd-server`,
/usr/bin/etcd, 3.4), whose data and ports belong to someone else. start() returns once the
client port answers /health, or raises EtcdError at its deadline with the end of etcd's log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ferry.protocol.errors import FerryError

ETCD_BINARY = "/usr/bin/etcd"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.05
LOG_TAIL = 2000  # characters of etcd's log quoted when it does not start


class EtcdError(FerryError):
    """etcd could not be started (missing binary, no answer before the deadline)."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def etcd_binary() -> str:
    """/usr/bin/etcd, else etcd on PATH; EtcdError naming the package when neither exists."""
    if os.access(ETCD_BINARY, os.X_OK):
        return ETCD_BINARY
    found = shutil.which("etcd")
    if found is None:
        raise EtcdError("etcd is not installed: apt-get install etcd-server (or `make deps`)")
    return found


@dataclass
class EtcdProcess:
    """One running etcd; `endpoint` is what etcdEndpoints takes (http://host:port)."""

    data_dir: Path
    host: str
    client_port: int
    peer_port: int
    name: str
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def start(self, timeout_s: float = START_TIMEOUT_S) -> EtcdProcess:
        """Starts etcd (again, after stop(), on the same ports and data) and waits until it
        answers; EtcdError at the deadline, the process stopped."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        client = f"http://{self.host}:{self.client_port}"
        peer = f"http://{self.host}:{self.peer_port}"
        args = [
            etcd_binary(),
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"{self.name}={peer}",
            "--log-level",
            "warn",
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if self.proc.poll() is not None:
                raise EtcdError(f"etcd exited with {self.proc.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise EtcdError(f"etcd did not answer within {timeout_s:g}s: {self.log_tail()}")
            time.sleep(POLL_S)  # wait-ok: polling interval of a deadline-bounded wait
        return self

    def healthy(self, timeout_s: float = 0.5) -> bool:
        try:
            url = f"{self.endpoint}/health"  # always http://host:port, built here
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310
                return bool(resp.status == 200 and b'"true"' in resp.read())
        except (OSError, urllib.error.URLError):
            return False

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, then SIGKILL at the deadline; the data dir is kept (start() again)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL: a crash, as a lost machine would be."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL:]
        return ""

    def __enter__(self) -> EtcdProcess:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def start_etcd(
    data_dir: str | Path,
    *,
    host: str = "127.0.0.1",
    client_port: int = 0,
    name: str = "ferry-etcd",
    timeout_s: float = START_TIMEOUT_S,
) -> EtcdProcess:
    """Starts an etcd with its data under data_dir, on client_port (0: a free one) and a free
    peer port, and returns it once it answers."""
    etcd = EtcdProcess(
        data_dir=Path(data_dir),
        host=host,
        client_port=client_port or free_port(host),
        peer_port=free_port(host),
        name=name,
    )
    return etcd.start(timeout_s)
