"""The driver that feeds fuzzed bytes to a RocketMQ door (fuzz_door_frames.py) and judges what
comes back: each example on a connection of its own, then a probe request on a fresh one.

The door must answer each whole request it was sent (outcome(): not oneway, not a response)
unless it closes the connection, and it must close it after a length out of bounds or a frame
that does not decode. Findings: a request left unanswered on an open connection (a route that
crashed: TcpDoor drops the frame and logs it), a connection left open after a bad frame, a
response that does not decode or answers nothing that was asked, an "internal error" remark,
the door's "could not encode" fallback (SYSTEM_ERROR with no remark), and a probe that is not
answered in time or not as before.
"""

from __future__ import annotations

import socket
import struct
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from fuzz_door_frames import outcome
from fuzz_targets import PING_DEADLINE_S, Finding, Tally

from ferry.protocol.rocketmq.codes import RequestCode
from ferry.protocol.rocketmq.command import CommandError, RemotingCommand, decode
from ferry.runtime.testing.remoting_client import RemotingClient

SYSTEM_ERROR = 1
NOT_SUPPORTED = 3
GRACE_S = 0.02  # how long an input that asks nothing is watched for output
SERVER_REQUESTS = {
    int(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED),
    int(RequestCode.CHECK_TRANSACTION_STATE),
}
_LENGTH = struct.Struct(">I")

# (a probe connection) -> what is wrong with its answer, or None
Probe = Callable[[RemotingClient], str | None]


class DoorTarget:
    def __init__(
        self, name: str, addr: str, probe: Probe, deadline_s: float = PING_DEADLINE_S
    ) -> None:
        self.name = name
        host, _, port = addr.rpartition(":")
        self.addr = addr
        self.where = (host.strip("[]"), int(port))
        self.probe_answer = probe
        self.deadline_s = deadline_s
        self.tally = Tally()
        self.codes: Counter[int] = Counter()  # response codes seen

    def feed(self, data: bytes) -> bool:
        """Sends one input on a new connection, judges the answers, then probes; False (with
        a finding) when something was wrong."""
        self.tally.sent += 1
        found = len(self.tally.findings)
        try:
            sock = socket.create_connection(self.where, timeout=self.deadline_s)
        except OSError as exc:
            self._find("no connection", str(exc), data)
            return False
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._exchange(sock, data)
        finally:
            sock.close()
        return self.probe(data) and len(self.tally.findings) == found

    def _exchange(self, sock: socket.socket, data: bytes) -> None:
        want = outcome(data)
        pending = Counter(want.answers)
        try:
            half = len(data) // 2
            sock.sendall(data[:half])  # two writes: the door must put a frame back together
            sock.sendall(data[half:])
        except OSError:
            if not want.closes:
                self._find("closed", "the door closed the connection while being sent", data)
            return
        deadline = time.monotonic() + (self.deadline_s if pending or want.closes else GRACE_S)
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                chunk = sock.recv(1 << 20)
            except TimeoutError:
                break
            except OSError:  # reset: closed, what was in flight lost with it
                chunk = b""
            if not chunk:
                if pending and not want.closes:
                    self._find("closed", f"closed with {dict(pending)} unanswered", data)
                return
            buf = self._responses(buf + chunk, pending, data)
            if not pending and not want.closes:
                deadline = min(deadline, time.monotonic() + GRACE_S)
        if pending and not want.closes:
            self._find("no response", f"opaques {dict(pending)} not answered", data)
        elif want.closes:
            self._find("not closed", f"open {self.deadline_s} s after a bad frame", data)

    def _responses(self, buf: bytes, pending: Counter[int], sent: bytes) -> bytes:
        """Judges every whole frame in buf; returns the rest."""
        while len(buf) >= 4:
            (size,) = _LENGTH.unpack_from(buf)
            if len(buf) < 4 + size:
                break
            frame, buf = buf[4 : 4 + size], buf[4 + size :]
            try:
                cmd = decode(frame)
            except CommandError as exc:
                self._find("undecodable response", str(exc), sent)
                continue
            self._judge(cmd, pending, sent)
        return buf

    def _judge(self, cmd: RemotingCommand, pending: Counter[int], sent: bytes) -> None:
        if not cmd.is_response:
            if cmd.code not in SERVER_REQUESTS:
                self._find("unexpected request", f"code {cmd.code}", sent)
            return
        if pending[cmd.opaque] <= 0:
            self._find("unasked response", f"code {cmd.code} opaque {cmd.opaque}", sent)
            return
        pending[cmd.opaque] -= 1
        if not pending[cmd.opaque]:
            del pending[cmd.opaque]  # a Counter of zeros is still true
        self.codes[cmd.code] += 1
        if cmd.code == 0:
            self.tally.replies += 1
        else:
            self.tally.errors += 1
        if cmd.remark.startswith("internal error"):
            self._find("internal error", cmd.remark, sent)
        elif cmd.code == SYSTEM_ERROR and not cmd.remark:
            self._find("unencodable response", "SYSTEM_ERROR without a remark", sent)

    def probe(self, after: Any = None) -> bool:
        """A fresh connection's probe request, answered in time and as expected."""
        try:
            with RemotingClient(self.addr, timeout_s=self.deadline_s) as client:
                wrong = self.probe_answer(client)
        except (OSError, CommandError) as exc:  # TimeoutError and ConnectionError included
            wrong = f"{type(exc).__name__}: {exc}"
        if wrong is None:
            return True
        self._find("probe", wrong, after)
        return False

    def _find(self, kind: str, detail: str, sent: Any) -> None:
        self.tally.findings.append(Finding(self.name, kind, detail[:400], sent))


def served_codes(addr: str, candidates: tuple[int, ...]) -> tuple[int, ...]:
    """The codes a door does not refuse as not supported, asked with no fields."""
    served = []
    with RemotingClient(addr) as client:
        for code in candidates:
            got = client.call(code)
            if not (got.code == NOT_SUPPORTED and "not supported" in got.remark):
                served.append(code)
    return tuple(served)


# ---- the probes: a request each door serves, answered as it was before the run ----


def cluster_info_probe(client: RemotingClient) -> RemotingCommand:
    return client.call(RequestCode.GET_BROKER_CLUSTER_INFO)


def max_offset_probe(topic: str) -> Callable[[RemotingClient], RemotingCommand]:
    def ask(client: RemotingClient) -> RemotingCommand:
        return client.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})

    return ask


def same_as(ask: Callable[[RemotingClient], RemotingCommand], first: RemotingCommand) -> Probe:
    """A probe whose answer must be a success with the code, fields and body of `first`."""
    assert first.code == 0, first

    def probe(client: RemotingClient) -> str | None:
        got = ask(client)
        if (got.code, got.ext_fields, got.body) != (first.code, first.ext_fields, first.body):
            return f"answered {got.code} {got.remark!r} {got.ext_fields} {got.body[:200]!r}"
        return None

    return probe
