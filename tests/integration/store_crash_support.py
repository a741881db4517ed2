"""A broker whose store is killed with SIGKILL while producers send, and the check that every
acknowledged message survived. Used by test_store_crash.py and bench/soak_store_crash.py.

Producers are raw wire clients (no SDK retries): each message is sent once, under a unique key,
with a body derived from the key, so what the broker serves can be checked byte for byte.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq

from ferry.protocol import record
from ferry.protocol.codes import PullStatus, SendStatus
from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    AnyRequest,
    OkReply,
    PullMessageReply,
    PullMessageRequest,
    SendMessageReply,
    SendMessageRequest,
    StoreStatusReply,
    StoreStatusRequest,
    TopicConfig,
    UpdateTopicRequest,
)
from ferry.runtime.launcher import (
    LocalCluster,
    ServiceProcess,
    service_args,
    start_broker_services,
    start_service,
)

TOPIC = "CrashTopic"
QUEUES = 4
CRASH_STORE = {
    "mappedFileSizeCommitLog": str(64 * 1024),  # segments roll every ~100 messages
    "mappedFileSizeConsumeQueue": str(20 * 100),
}


def body_for(key: str) -> bytes:
    """The body a key is sent with: its length and bytes follow from the key alone."""
    return (key.encode() + b"|") * (zlib.crc32(key.encode()) % 60 + 1)


@dataclass(frozen=True)
class Acked:
    key: str
    queue_id: int
    queue_offset: int
    phys_offset: int


class Wire:
    """One DEALER speaking the Ferry framing; every wait bounded."""

    def __init__(self, ctx: zmq.Context[Any], addr: str) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(addr if "://" in addr else f"tcp://{addr}")
        self.codec = RequestCodec()
        self._ids = itertools.count(1)

    def send(self, body: AnyRequest, payload: list[bytes] | None = None) -> int:
        rid = next(self._ids)
        self.sock.send_multipart(self.codec.request_frames(RequestEnvelope(rid, body), payload))
        return rid

    def wait(self, rid: int, timeout_s: float, stop: threading.Event | None = None) -> Any:
        """The reply to rid, or None when the time is up (or stop is set)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
            if not self.sock.poll(50):
                continue
            env, payload = self.codec.decode_reply(self.sock.recv_multipart()[1:])
            if env.id == rid:
                return env.body, payload
        return None

    def call(self, body: AnyRequest, timeout_s: float = 15.0) -> Any:
        got = self.wait(self.send(body), timeout_s)
        if got is None:
            raise AssertionError(f"no reply to {type(body).__name__} within {timeout_s} s")
        return got

    def close(self) -> None:
        self.sock.close(linger=0)


@dataclass
class CrashRig:
    """A broker (store and remoting, launched as in production) on `root`."""

    root: Path
    flush_disk_type: str = "SYNC_FLUSH"
    producers: int = 4
    extra: dict[str, str] = field(default_factory=dict)
    cluster: LocalCluster = field(default_factory=LocalCluster)
    acked: dict[str, Acked] = field(default_factory=dict)
    sent: int = 0
    rounds: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ctx: zmq.Context[Any] = field(default_factory=zmq.Context)

    @property
    def settings(self) -> dict[str, str]:
        return {
            "storePathRootDir": str(self.root),
            "flushDiskType": self.flush_disk_type,
            **CRASH_STORE,
            **self.extra,
        }

    def start(self) -> None:
        start_broker_services(
            self.cluster, str(self.root), namesrv_addr="", overrides=self.settings
        )
        admin = Wire(self._ctx, self.cluster.broker_addr)
        try:
            reply, _ = admin.call(UpdateTopicRequest(TopicConfig(TOPIC, QUEUES, QUEUES)))
            assert isinstance(reply, OkReply), reply
        finally:
            admin.close()

    @property
    def store(self) -> ServiceProcess:
        return self.cluster.get("broker-store")

    def restart_store(self, *, kill: bool) -> None:
        """SIGKILL (or a clean stop) and a new store on the same endpoint; remoting stays up and
        reconnects by itself."""
        old = self.store
        if kill:
            old.kill()
        else:
            assert old.stop() == 0
        self.cluster.processes.remove(old)
        settings = {
            **self.settings,
            "storeEndpoint": self.cluster.store_endpoint,
            "storeFeedEndpoint": "tcp://127.0.0.1:0",
        }
        self.cluster.processes.insert(
            0, start_service("broker-store", service_args(None, settings))
        )

    # ---- producing ----

    def _produce(self, worker: int, stop: threading.Event, rng: random.Random) -> None:
        wire = Wire(self._ctx, self.cluster.broker_addr)
        try:
            while not stop.is_set():
                with self._lock:
                    first = self.sent
                    count = rng.randint(1, 8)
                    self.sent += count
                keys = [f"w{worker}-m{first + i}" for i in range(count)]
                payload = b"".join(
                    record.encode_record(
                        TOPIC.encode(),
                        body_for(k),
                        record.encode_properties({record.PROPERTY_UNIQ_KEY: k}),
                    )
                    for k in keys
                )
                req = SendMessageRequest("crash-producers", TOPIC, -1, count)
                got = wire.wait(wire.send(req, [payload]), 15.0, stop)
                if got is None:
                    return  # the store died under this send: it is not acknowledged
                reply = got[0]
                if isinstance(reply, SendMessageReply) and reply.status == SendStatus.SEND_OK:
                    with self._lock:
                        for i, k in enumerate(keys):
                            self.acked[k] = Acked(
                                k, reply.queue_id, reply.queue_offset + i, reply.phys_offsets[i]
                            )
        finally:
            wire.close()

    def produce_until(
        self, acked_target: int, wait: Callable[[Callable[[], bool]], None], rng: random.Random
    ) -> tuple[threading.Event, list[threading.Thread]]:
        """Starts the producers and returns once `acked_target` messages were acknowledged; the
        producers keep sending until the caller sets the event."""
        stop = threading.Event()
        threads = [
            threading.Thread(
                target=self._produce, args=(w, stop, random.Random(rng.random())), daemon=True
            )
            for w in range(self.producers)
        ]
        for t in threads:
            t.start()
        wait(lambda: len(self.acked) >= acked_target)
        return stop, threads

    def crash_round(self, rng: random.Random, wait: Callable[[Callable[[], bool]], None]) -> None:
        """Producers send; at a random number of acknowledgements the store is killed -9 in
        the middle of their traffic; then it restarts on the same files."""
        stop, threads = self.produce_until(len(self.acked) + rng.randint(10, 150), wait, rng)
        self.restart_store(kill=True)
        stop.set()
        for t in threads:
            t.join(10)
        self.rounds += 1

    # ---- checking ----

    def store_status(self) -> StoreStatusReply:
        wire = Wire(self._ctx, self.cluster.store_endpoint)
        try:
            reply, _ = wire.call(StoreStatusRequest())
            assert isinstance(reply, StoreStatusReply), reply
            return reply
        finally:
            wire.close()

    def verify(self) -> int:
        """Reads every queue from offset 0 through remoting and checks it; returns how many
        messages the broker holds. Raises AssertionError naming the first problem."""
        wire = Wire(self._ctx, self.cluster.broker_addr)
        seen: dict[str, tuple[int, int, int]] = {}
        phys_seen: set[int] = set()
        try:
            for qid in range(QUEUES):
                offset = 0
                while True:
                    req = PullMessageRequest("crash-checker", TOPIC, qid, offset, max_msgs=512)
                    reply, payload = wire.call(req)
                    assert isinstance(reply, PullMessageReply), reply
                    if reply.status != PullStatus.FOUND:
                        assert reply.status == PullStatus.NO_NEW_MSG, (qid, offset, reply)
                        assert offset == reply.max_offset, (qid, offset, reply)
                        break
                    data = payload[0]
                    pos = 0
                    for rec in record.iter_records(data):
                        where = f"queue {qid} offset {offset} (phys {rec.phys_offset})"
                        assert record.verify_crc(data, pos, rec.total_size), f"bad CRC at {where}"
                        assert (rec.queue_id, rec.queue_offset) == (qid, offset), where
                        assert rec.phys_offset not in phys_seen, f"served twice: {where}"
                        key = rec.properties[record.PROPERTY_UNIQ_KEY]
                        assert key not in seen, f"{key} stored twice: {seen[key]} and {where}"
                        assert rec.body == body_for(key), f"{key}: body corrupt at {where}"
                        seen[key] = (qid, offset, rec.phys_offset)
                        phys_seen.add(rec.phys_offset)
                        pos += rec.total_size
                        offset += 1
                    assert offset == reply.next_begin_offset, (qid, offset, reply)
        finally:
            wire.close()
        for key, ack in self.acked.items():
            assert key in seen, f"acknowledged {ack} is missing after {self.rounds} kills"
            assert seen[key] == (ack.queue_id, ack.queue_offset, ack.phys_offset), (
                f"acknowledged {ack} is served at {seen[key]}"
            )
        return len(seen)

    def close(self) -> None:
        self.cluster.stop()
        self._ctx.destroy(linger=0)
