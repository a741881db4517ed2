"""How long a service of `ferry dev up` is gone after kill -9: until the supervisor has it
back (its READY line), and until it serves again as clients see it.

    uv run python bench/supervision_restart.py [--rounds 3] [--services broker-store,...]

Runs `ferry dev up` on free ports with the default restart policy (waits of 0.5 s, 1 s, 2 s
for a first, second, third crash within a minute: the figures include them). Each round
kills the service with SIGKILL and measures, from the kill:
- back: the supervisor's `<service> is back` line (the new process printed READY);
- serving: broker-remoting and broker-store, a send from a producer that was running before
  succeeds; index, scheduler and ha-replicator, a ping on their endpoint is answered;
  namesrv, a new client gets the topic's route (the broker must register again: it does so
  every registerNameServerPeriod, 30 s by default); console, its page answers.
Rounds of one service follow each other at once, so the supervisor's wait doubles.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from common import Figure, report

from ferry.admin import Admin
from ferry.client import FerryError, Message, Producer, SendStatus
from ferry.protocol.messages import PingRequest, PongReply
from ferry.protocol.rpc import BlockingClient

MODULES = {
    "namesrv": "ferry.namesrv",
    "console": "ferry.console",
    "broker-store": "ferry.store",
    "index": "ferry.index",
    "scheduler": "ferry.scheduler",
    "checkback": "ferry.scheduler.checkback",
    "ha-replicator": "ferry.ha",
    "broker-remoting": "ferry.remoting",
}
TOPIC = "SupervisionBench"


class Dev:
    def __init__(self, data: str) -> None:
        ferry = str(Path(sys.executable).parent / "ferry")
        argv = [ferry, "dev", "up", "--data-dir", data]
        argv += ["--namesrv-port", "0", "--broker-port", "0", "--console-port", "0"]
        argv += ["--proxy-port", "0"]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.endpoints: dict[str, str] = {}
        threading.Thread(target=self._read, daemon=True).start()
        ready = self.wait_for("READY ", 180)
        self.fields = dict(part.split("=", 1) for part in ready.split()[1:])

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.rstrip("\n")
            if "] listening " in line:
                name = line[1 : line.index("]")]
                fields = dict(p.split("=", 1) for p in line.split()[2:] if "=" in p)
                self.endpoints[name] = fields.get("endpoint") or fields.get("addr", "")
            self.lines.put(line)

    def wait_for(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if line.startswith(prefix):
                return line

    def pid_of(self, service: str) -> int:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except (OSError, IndexError):
                continue
            if ppid == self.proc.pid and MODULES[service].encode() in args:
                return int(entry)
        raise LookupError(service)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def until(check: Callable[[], bool], timeout: float = 120.0) -> float:
    """Polls check() until true; returns the monotonic time it first was."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(0.005)  # between polls of a deadline-bounded wait
    raise TimeoutError("not serving again in time")


def pinged(endpoint: str) -> bool:
    with BlockingClient(endpoint) as client:
        answer = client.call(PingRequest(), 300)
    return answer is not None and isinstance(answer[0], PongReply)


def routed(namesrv: str) -> bool:
    try:
        with Admin(namesrv) as admin:
            return bool(admin.topic_route(TOPIC).queue_datas)
    except FerryError:
        return False


def console_up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as page:
            return bool(page.status == 200)
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--services", default=",".join(MODULES))
    ns = parser.parse_args()
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as data:
        dev = Dev(data)
        namesrv = dev.fields["namesrv"]
        try:
            with Admin(namesrv) as admin:
                admin.create_topic(TOPIC, 4, 4)
            until(lambda: routed(namesrv), 30)
            with Producer("pg-supervision-bench", namesrv, send_timeout_ms=1000) as producer:

                def sent() -> bool:
                    try:
                        result = producer.send(Message(TOPIC, b"x"))
                    except FerryError:
                        return False
                    return result.status == SendStatus.SEND_OK

                until(sent, 30)
                serving: dict[str, Callable[[], bool]] = {
                    "broker-store": sent,
                    "broker-remoting": sent,
                    "namesrv": lambda: routed(namesrv),
                    "console": lambda: console_up(dev.fields["console"]),
                }
                for service in ns.services.split(","):
                    back: list[float] = []
                    up: list[float] = []
                    for _ in range(ns.rounds):
                        pid = dev.pid_of(service)
                        killed = time.monotonic()
                        os.kill(pid, signal.SIGKILL)
                        dev.wait_for(f"[supervisor] {service} is back", 120)
                        back.append((time.monotonic() - killed) * 1000)
                        endpoint = dev.endpoints[service]
                        check = serving.get(service, lambda e=endpoint: pinged(e))
                        up.append((until(check) - killed) * 1000)
                        print(f"{service}: back {back[-1]:.0f} ms, serving {up[-1]:.0f} ms")
                    figures.append(Figure(f"{service}: kill -9 to READY", "ms", back))
                    figures.append(Figure(f"{service}: kill -9 to serving", "ms", up))
        finally:
            dev.stop()
    report("supervision restart", figures)


if __name__ == "__main__":
    main()
