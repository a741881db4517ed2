"""`ferry serve broker` as a supervised process tree for the supervision tests: start it,
find its services' pids in /proc, kill one, read the supervisor's lines."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from itest_support import FERRY, LineReader, alive, live_parents, wait_for

MODULES = {
    "broker-store": "ferry.store",
    "index": "ferry.index",
    "scheduler": "ferry.scheduler",
    "checkback": "ferry.scheduler.checkback",
    "ha-replicator": "ferry.ha",
    "broker-remoting": "ferry.remoting",
}

# short waits so that a test sees several restarts in seconds (the defaults are 0.5 s .. 30 s)
FAST_POLICY = "first_wait=0.1,max_wait=1,max_crashes=5,window=60"


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def child_running(parent: int, module: str, without: str = "") -> int | None:
    """The pid of parent's live child running `python -m module` (and whose arguments do
    not contain `without`)."""
    for pid, ppid in live_parents().items():
        args = cmdline(pid) if ppid == parent else []
        if module in args and not (without and any(without in a for a in args)):
            return pid
    return None


class ServedBroker:
    """`ferry serve broker` on free ports under tmp, until its READY line."""

    def __init__(
        self, root: Path, namesrv: str, policy: str = FAST_POLICY, *, new_session: bool = False
    ) -> None:
        """new_session: in a process group of its own, which a test can signal as a
        terminal's Ctrl-C does."""
        argv = [FERRY, "serve", "broker", "--set", "listenPort=0"]
        argv += ["--set", f"storePathRootDir={root}", "--set", f"namesrvAddr={namesrv}"]
        argv += ["--set", "flushDiskType=SYNC_FLUSH"]
        argv += ["--set", "mappedFileSizeCommitLog=1048576"]
        env = {**os.environ, "FERRY_RESTART_POLICY": policy}
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=new_session,
        )
        assert self.proc.stdout is not None
        self.reader = LineReader(self.proc.stdout)
        ready = self.reader.wait_for_prefix("READY broker ", timeout=120)
        self.addr = ready.split("addr=", 1)[1]

    def pid_of(self, service: str) -> int:
        pid = child_running(self.proc.pid, MODULES[service])
        assert pid is not None, f"no {service} under {self.proc.pid}"
        return pid

    def endpoint_of(self, service: str) -> str:
        """The endpoint= (or addr=) its last `[service] listening` line gave."""
        for line in reversed(self.reader.lines):
            if line.startswith(f"[{service}] listening "):
                fields = dict(p.split("=", 1) for p in line.split()[2:])
                return fields.get("endpoint") or fields["addr"]
        raise AssertionError(f"{service} printed no listening line")

    def kill9(self, service: str) -> int:
        """kill -9 of one service; returns its pid once it is dead."""
        pid = self.pid_of(service)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not alive(pid), 10, f"{service} {pid} to die")
        return pid

    def wait_restarted(self, service: str, old_pid: int, timeout: float = 60) -> int:
        """Waits for the supervisor's lines about old_pid's exit and its successor's READY;
        returns the new pid."""
        said = self.reader.wait_for_prefix(f"[supervisor] {service} (pid {old_pid}) exited")
        assert " exited with SIGKILL; restarting in " in said, said
        back = self.reader.wait_for_prefix(f"[supervisor] {service} is back", timeout=timeout)
        new_pid = int(back.rsplit("pid ", 1)[1].rstrip(")"))
        assert new_pid != old_pid
        assert self.pid_of(service) == new_pid
        return new_pid

    def stop(self) -> int:
        """SIGTERM; its exit code once it and its output have ended."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.reader.close()
