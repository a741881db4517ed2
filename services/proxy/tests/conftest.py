"""What the tests with RocketMQ 5's unchanged Python client share: a local cluster, the proxy
process on a free port, and a runner for client programs (rocketmq-python-client 5.1.2 in a
venv of its own, HOME in a temporary folder since importing it writes ~/logs)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from ferry.admin import Admin
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.client_venvs import rocketmq_grpc_python
from ferry.runtime.testing.pytest_support import wait_for

ClientRunner = Callable[..., str]


class ProxyProcess:
    """`python -m ferry.proxy` on a free port; its lines kept, its address from READY."""

    def __init__(self, namesrv: str, home: Path, settings: Sequence[str] = ()) -> None:
        """settings: more `key=value` for its --set flags."""
        self.lines: list[str] = []
        sets = [f"namesrvAddr={namesrv}", "proxyListenPort=0", *settings]
        args = [a for item in sets for a in ("--set", item)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ferry.proxy", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            # the generated modules' package writes its log under ~/logs when imported
            env={**os.environ, "HOME": str(home), "FERRY_PARENT_PID": str(os.getpid())},
        )
        self._reader = threading.Thread(target=self._read, name="proxy-output", daemon=True)
        self._reader.start()
        ready = wait_for(self._ready_line, 60, "the proxy's READY line")
        self.addr = ready.split("grpc=", 1)[1].strip()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def _ready_line(self) -> str | None:
        found = next((ln for ln in self.lines if ln.startswith("READY proxy ")), None)
        if found is None and self.proc.poll() is not None:
            pytest.fail("the proxy exited before READY:\n" + "\n".join(self.lines[-20:]))
        return found

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)  # it ends at the output's end
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # enablePropertyFilter: the consumers' SQL92 filters
    local = start_local_cluster(
        str(tmp_path_factory.mktemp("proxy-cluster")),
        overrides={"enablePropertyFilter": "true"},
    )
    try:
        with Admin(local.namesrv_addr) as admin:  # READY comes before the registration
            wait_for(admin.master_addrs, 15, "the broker to register")
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proxy-home")


@pytest.fixture(scope="session")
def proxy_process() -> type[ProxyProcess]:
    """The class, for a module that starts a proxy of its own (other settings)."""
    return ProxyProcess


@pytest.fixture(scope="module")
def proxy(cluster: LocalCluster, home: Path) -> Iterator[ProxyProcess]:
    process = ProxyProcess(cluster.namesrv_addr, home)
    try:
        yield process
    finally:
        process.stop()


def run_client(home: Path, program: str, *args: str, timeout: float = 120) -> str:
    """Runs `program` with the client's python; its stdout (the test fails on a non-zero
    exit, with the program's stderr)."""
    script = home / "program.py"
    script.write_text(program)
    done = subprocess.run(
        [str(rocketmq_grpc_python()), str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def client(home: Path) -> ClientRunner:
    def run(program: str, *args: str, timeout: float = 120) -> str:
        return run_client(home, program, *args, timeout=timeout)

    return run
