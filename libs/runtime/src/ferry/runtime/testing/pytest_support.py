"""The test support that needs pytest: deadline-bounded waits, a bare wire client, the
module-wide cluster fixture and the small-tmpfs fixture. Only tests import this module."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import zmq

from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.runtime.testing.cluster import Cluster, running_cluster
from ferry.runtime.testing.small_disk import small_disk

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T | None], timeout: float = 10.0, what: str = "condition"
) -> T:
    """Polls predicate until it returns something truthy; fails the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)  # wait-ok: polling interval of a deadline-bounded wait


def holds_for(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    """An observation window for what must NOT happen (a second delivery, a filtered message
    getting through): predicate must stay true for `seconds`; the test fails at the first
    moment it does not. Not a wait for readiness: use wait_for for that."""
    end = time.monotonic() + seconds
    while True:
        if not predicate():
            pytest.fail(f"no longer true: {what}")
        if time.monotonic() >= end:
            return
        time.sleep(0.02)  # wait-ok: polling interval of an observation window


class RawClient:
    """A bare DEALER speaking the wire protocol, every receive bounded by a poll: for a
    service's own requests, or what no SDK would send."""

    def __init__(self, endpoint: str) -> None:
        if "://" not in endpoint:
            endpoint = f"tcp://{endpoint}"
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.codec = RequestCodec()
        self._ids = itertools.count(1)
        self._next = 0

    def _id(self) -> int:
        self._next = next(self._ids)
        return self._next

    def send_raw(self, frames: list[bytes], timeout_ms: int = 10_000) -> tuple[Any, list[Any]]:
        self.sock.send_multipart(frames)
        if not self.sock.poll(timeout_ms):
            pytest.fail(f"no reply within {timeout_ms / 1000:g} s")
        env, payload = self.codec.decode_reply(self.sock.recv_multipart()[1:])
        return env, payload

    def call(self, body: Any, payload: list[bytes] | None = None) -> tuple[Any, list[Any]]:
        """(reply body, reply payload) of one request; fails the test after 10 s."""
        rid = self._id()
        env, reply_payload = self.send_raw(
            self.codec.request_frames(RequestEnvelope(rid, body), payload)
        )
        assert env.id == rid
        return env.body, reply_payload

    def try_call(self, body: Any, timeout_ms: int) -> Any | None:
        """The reply's body, or None when none came within timeout_ms (a service that is
        restarting never answers what its old process took)."""
        rid = self._id()
        self.sock.send_multipart(self.codec.request_frames(RequestEnvelope(rid, body)))
        if not self.sock.poll(timeout_ms):
            return None
        env, _ = self.codec.decode_reply(self.sock.recv_multipart()[1:])
        return env.body if env.id == rid else None

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


@pytest.fixture(scope="module", name="cluster")
def module_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for a whole test module, whose tests each use topics and groups of their
    own: a module imports this as its `cluster` fixture (a start and stop is ~3 s a test)."""
    with running_cluster(tmp_path_factory.mktemp("module")) as c:
        yield c


def disk_fixture(size: int) -> Any:
    """A `disk` fixture: a tmpfs of `size` bytes at tmp_path/disk for the test, or the test
    skipped, saying why, where mounting is not allowed (it needs root).
    A module takes it as `disk = disk_fixture(SIZE)`."""

    @pytest.fixture(name="disk")
    def disk(tmp_path: Path) -> Iterator[Path]:
        with small_disk(tmp_path / "disk", size) as refused:
            if refused:
                pytest.skip(f"cannot mount a tmpfs here (needs root): {refused}")
            yield tmp_path / "disk"

    return disk
