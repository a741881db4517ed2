"""Recovery after any restart (issue 25.2): once a killed service is back, clients get what
they would have got without the kill, within seconds: routes from a restarted name server,
answers from an index that caught up from the log, every delayed message once from a
scheduler that caught up, and messages for a consumer whose long poll was held at the kill."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from consume_support import create_topic
from itest_support import FERRY, LineReader, alive, wait_for
from supervision_support import FAST_POLICY, ServedBroker, child_running

from ferry.client import FerryError, Message, Producer, SendStatus

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

# how soon a new client must find routes at a restarted name server (the broker's own period,
# registerNameServerPeriod, stays 30 s)
ROUTES_BACK_WITHIN_S = 5.0


class ServedNamesrv:
    """`ferry serve namesrv` on a free port, restarted by its supervisor after a kill."""

    def __init__(self, policy: str = FAST_POLICY) -> None:
        env = {**os.environ, "FERRY_RESTART_POLICY": policy}
        argv = [FERRY, "serve", "namesrv", "--set", "listenPort=0"]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        assert self.proc.stdout is not None
        self.reader = LineReader(self.proc.stdout)
        self.addr = self.reader.wait_for_prefix("READY namesrv addr=").split("addr=", 1)[1]

    def pid(self) -> int:
        pid = child_running(self.proc.pid, "ferry.namesrv")
        assert pid is not None, "no name server under its supervisor"
        return pid

    def kill9_and_wait_back(self) -> tuple[float, float]:
        """kill -9 of the name server; returns the monotonic times of the kill and of its
        successor's ready line."""
        old = self.pid()
        killed_at = time.monotonic()
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: not alive(old), 10, "the name server to die")
        self.reader.wait_for_prefix("[supervisor] namesrv is back", timeout=30)
        back_at = time.monotonic()
        assert self.pid() != old
        return killed_at, back_at

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.reader.close()


@pytest.fixture
def namesrv() -> Iterator[ServedNamesrv]:
    served = ServedNamesrv()
    try:
        yield served
    finally:
        served.close()


def send_ok(producer: Producer, topic: str, body: bytes, keys: list[str] | None = None) -> bool:
    try:
        return producer.send(Message(topic, body, keys=keys)).status == SendStatus.SEND_OK
    except FerryError:
        return False


def test_a_restarted_name_server_routes_to_the_broker_within_seconds(
    tmp_path: Path, namesrv: ServedNamesrv
) -> None:
    """kill -9 of the name server under `ferry serve namesrv`: once it is back, a NEW
    producer (no routes cached) sends within seconds, not at the broker's next periodic
    registration (30 s away)."""
    broker = ServedBroker(tmp_path / "broker", namesrv.addr)
    try:
        create_topic(namesrv.addr, "RoutedAgain", 2)
        times: list[tuple[float, float]] = []  # (from the kill, from the ready line)
        for _round in range(3):
            killed_at, back_at = namesrv.kill9_and_wait_back()
            with Producer("pg-routed-again", namesrv.addr, send_timeout_ms=2000) as producer:
                wait_for(
                    lambda p=producer: send_ok(p, "RoutedAgain", b"x"),  # type: ignore[misc]
                    30,
                    "a send by a new producer",
                )
            sent_at = time.monotonic()
            times.append((sent_at - killed_at, sent_at - back_at))
        print(
            "name server kill -9 -> first send by a new producer (after its ready line): "
            + ", ".join(f"{k:.2f} s ({b:.2f} s)" for k, b in times)
        )
        assert max(b for _, b in times) < ROUTES_BACK_WITHIN_S, times
        assert broker.stop() == 0
    finally:
        broker.close()
