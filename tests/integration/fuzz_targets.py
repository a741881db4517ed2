"""Drivers that feed fuzzed input to one port and judge what comes back: every ZeroMQ
request port (a DEALER sending frames, then a ping that must be answered in time), the store's
feed (an XSUB sending subscription messages) and the console (HTTP pages and OTLP exports).

What counts as a finding: no answer to the ping after a frame (a crash or a hang), a reply that
does not decode, an "internal error" reply (a handler crashed on the input), an HTTP 5xx or a
dropped HTTP connection.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import zmq
from fuzz_frames import KEPT_TOPIC, sample_request
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st
from itest_support import RawClient

from ferry.protocol.codes import ResponseCode
from ferry.protocol.framing import FrameError, RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    ErrorReply,
    GetMaxOffsetRequest,
    PingRequest,
    PongReply,
    StoreReadLogReply,
    StoreReadLogRequest,
)

Frames = list[bytes]
PING_DEADLINE_S = 10.0  # generous: 2 cores shared with other test runs
HTTP_TIMEOUT_S = 10.0


@dataclass
class Finding:
    port: str
    kind: str
    detail: str
    sent: Any

    def __str__(self) -> str:
        return f"[{self.port}] {self.kind}: {self.detail}\n    sent: {self.sent!r:.600}"


@dataclass
class Tally:
    sent: int = 0
    errors: int = 0  # typed ErrorReply answers
    replies: int = 0  # other well-formed replies (a fuzzed request that made sense)
    findings: list[Finding] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.sent += other.sent
        self.errors += other.errors
        self.replies += other.replies
        self.findings.extend(other.findings)


class ZmqTarget:
    """One request port fed over one DEALER; replies to fuzzed frames may come late (a held
    long poll), so every reply that arrives is judged, not only the next one."""

    def __init__(self, name: str, endpoint: str, ping_deadline_s: float = PING_DEADLINE_S) -> None:
        if "://" not in endpoint:
            endpoint = f"tcp://{endpoint}"
        self.name = name
        self.endpoint = endpoint
        self.ping_deadline_s = ping_deadline_s
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.codec = RequestCodec()
        self._ping_ids = itertools.count(2**62)
        self.tally = Tally()
        self.sock = self._connect()

    def _connect(self) -> zmq.Socket[Any]:
        sock: zmq.Socket[Any] = self.ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.sndtimeo = int(self.ping_deadline_s * 1000)
        sock.connect(self.endpoint)
        return sock

    def feed(self, frames: Frames) -> bool:
        """Sends one fuzzed message and a ping; False (with a finding) when the ping is not
        answered in time, after which the socket is a new one."""
        self.tally.sent += 1
        try:
            self.sock.send_multipart(frames)
        except zmq.ZMQError as exc:
            return self._lost(frames, f"could not send: {exc}")
        return self.ping(frames)

    def ping(self, after: Any = None) -> bool:
        rid = next(self._ping_ids)
        try:
            self.sock.send_multipart(self.codec.request_frames(RequestEnvelope(rid, PingRequest())))
        except zmq.ZMQError as exc:
            return self._lost(after, f"could not send a ping: {exc}")
        deadline = time.monotonic() + self.ping_deadline_s
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not self.sock.poll(left_ms):
                return self._lost(after, f"no answer to a ping within {self.ping_deadline_s} s")
            reply = self.sock.recv_multipart()
            if self._judge(reply, after) == rid:
                return True

    def _judge(self, reply: Frames, sent: Any) -> int | None:
        """Checks one reply; returns its id when it is a pong."""
        frames = reply[1:] if reply and not reply[0] else reply
        try:
            env, _ = self.codec.decode_reply(frames)
        except FrameError as exc:
            self._find("undecodable reply", str(exc), sent)
            return None
        if isinstance(env.body, PongReply):
            return env.id
        if isinstance(env.body, ErrorReply):
            self.tally.errors += 1
            if env.body.message.startswith("internal error"):
                self._find("internal error", env.body.message, sent)
        else:
            self.tally.replies += 1
        return None

    def _lost(self, sent: Any, why: str) -> bool:
        self._find("no answer", why, sent)
        self.sock.close()
        self.sock = self._connect()  # a fresh socket: nothing queued from before
        return False

    def _find(self, kind: str, detail: str, sent: Any) -> None:
        self.tally.findings.append(Finding(self.name, kind, detail[:400], sent))

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


class FeedTarget:
    """The store's dispatch feed (an XPUB): subscription messages are all a peer can send it.
    Judged by the store's request port still answering pings."""

    def __init__(self, feed_endpoint: str, store: ZmqTarget) -> None:
        self.store = store
        self.sock = store.ctx.socket(zmq.XSUB)
        self.sock.linger = 0
        self.sock.connect(feed_endpoint)

    def feed(self, frames: Frames) -> bool:
        self.store.tally.sent += 1
        for frame in frames:
            self.sock.send(frame)
        return self.store.ping(("feed", frames))

    def close(self) -> None:
        self.sock.close()


class HttpTarget:
    """The console: GET pages and POST /v1/traces, each followed by GET /healthz."""

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("http://").rstrip("/").partition(":")
        self.host, self.port = host, int(port)
        self.tally = Tally()

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> int | str:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=HTTP_TIMEOUT_S)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            resp.read()
            return resp.status
        except (OSError, http.client.HTTPException) as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()

    def get(self, path: str) -> bool:
        return self._judge(self._request("GET", path), ("GET", path))

    def post_traces(self, body: bytes, media: str, encoding: str) -> bool:
        headers = {"Content-Type": media}
        if encoding:
            headers["Content-Encoding"] = encoding
        sent = ("POST /v1/traces", media, encoding, body[:200])
        return self._judge(self._request("POST", "/v1/traces", body, headers), sent)

    def raw(self, data: bytes) -> bool:
        """Bytes that are not HTTP at all, on a fresh connection."""
        self.tally.sent += 1
        try:
            with socket.create_connection((self.host, self.port), timeout=HTTP_TIMEOUT_S) as s:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
        except OSError:
            pass  # closing on garbage is a fine answer
        return self.healthy(("raw", data[:200]))

    def _judge(self, status: int | str, sent: Any) -> bool:
        self.tally.sent += 1
        if isinstance(status, str):
            self.tally.findings.append(Finding("console", "no answer", status, sent))
        elif status >= 500:
            self.tally.findings.append(Finding("console", f"HTTP {status}", "server error", sent))
        elif status >= 400:
            self.tally.errors += 1
        else:
            self.tally.replies += 1
        return self.healthy(sent)

    def healthy(self, after: Any = None) -> bool:
        status = self._request("GET", "/healthz")
        if status == 200:
            return True
        self.tally.findings.append(Finding("console", "unhealthy", f"/healthz: {status}", after))
        return False


def drive(
    feed: Callable[[Any], bool],
    strategy: st.SearchStrategy[Any],
    *,
    budget_s: float,
    max_examples: int,
    seed: int | None = None,
) -> int:
    """Feeds up to max_examples generated inputs, stopping at budget_s; derandomized (the same
    inputs every run) unless a seed is given. Returns how many were fed. Findings are collected
    by the target, not raised, so that one run reports all of them."""
    deadline = time.monotonic() + budget_s
    fed = 0

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=seed is None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    @given(strategy)
    def one(value: Any) -> None:
        nonlocal fed
        if time.monotonic() >= deadline:
            raise _OutOfTime  # ends the run: hypothesis stops at the first "failure"
        fed += 1
        feed(value)

    if seed is not None:
        one = hypothesis.seed(seed)(one)
    with contextlib.suppress(_OutOfTime):
        one()
    return fed


class _OutOfTime(Exception):
    """The run's time budget is spent."""


def served_types(target: ZmqTarget, candidates: tuple[type[Any], ...]) -> tuple[type[Any], ...]:
    """The request types a port serves: those it does not refuse as 'does not serve', asked
    with one valid instance of each (fuzzed envelopes then aim mostly at these)."""
    served = []
    for i, tp in enumerate(candidates, start=1):
        rid = 2**61 + i
        target.sock.send_multipart(
            target.codec.request_frames(RequestEnvelope(rid, sample_request(tp)))
        )
        body = _reply_to(target, rid)
        if not (
            isinstance(body, ErrorReply)
            and body.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            and "does not serve" in body.message
        ):
            served.append(tp)  # answered, or held (a long poll)
    return tuple(served)


def _reply_to(target: ZmqTarget, rid: int) -> Any:
    deadline = time.monotonic() + target.ping_deadline_s
    while (left_ms := int((deadline - time.monotonic()) * 1000)) > 0 and target.sock.poll(left_ms):
        env, _ = target.codec.decode_reply(target.sock.recv_multipart()[1:])
        if env.id == rid:
            return env.body
    return None


def stored_log(store_endpoint: str) -> bytes:
    """The CommitLog's first bytes, as the store serves them to its followers."""
    client = RawClient(store_endpoint)
    try:
        body, payload = client.call(StoreReadLogRequest(0, 16 * 1024 * 1024))
    finally:
        client.close()
    assert isinstance(body, StoreReadLogReply), body
    return bytes(payload[0]) if payload else b""


def kept_offsets(broker_addr: str, topic: str = KEPT_TOPIC) -> list[Any]:
    """The answers to max-offset requests for the kept topic's queues."""
    client = RawClient(broker_addr)
    try:
        return [client.call(GetMaxOffsetRequest(topic, q))[0] for q in range(8)]
    finally:
        client.close()
