"""Helpers for cross-service tests: clusters of real processes started by the same launcher as
`ferry dev up`, deadline-bounded waits, and an OTLP/HTTP sink standing in for a tracing backend."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from ferry.runtime.launcher import LocalCluster, start_broker_services, start_local_cluster

# Small segments so that rolling happens in tests.
SMALL_STORE = {
    "mappedFileSizeCommitLog": str(4 * 1024 * 1024),
    "mappedFileSizeConsumeQueue": str(20 * 50_000),
}


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Polls predicate until it returns something truthy; fails the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)  # wait-ok: polling interval of a deadline-bounded wait


@dataclass
class Cluster:
    dir: Path
    local: LocalCluster
    env: dict[str, str] | None = None
    overrides: dict[str, str] = field(default_factory=dict)

    @property
    def namesrv(self) -> str:
        return self.local.namesrv_addr

    @property
    def broker_addr(self) -> str:
        return self.local.broker_addr

    def restart_broker(self) -> None:
        """Stops the broker group (store, index, scheduler, check-back, HA, remoting) cleanly
        and starts it
        again on the same port and dir."""
        port = self.broker_addr.rsplit(":", 1)[1]
        # the HA port too: derived from the broker port (+1) it may be taken by now
        ha_port = self.local.ha_addr.rsplit(":", 1)[1]
        names = ("broker-remoting", "ha-replicator", "checkback", "scheduler", "index")
        for name in (*names, "broker-store"):
            sp = self.local.get(name)
            sp.stop()
            self.local.processes.remove(sp)
        start_broker_services(
            self.local,
            str(self.dir / "broker-a"),
            namesrv_addr=self.namesrv,
            broker_port=int(port),
            overrides={**self.overrides, "haListenPort": ha_port},
            env=self.env,
        )


def start_cluster(
    tmp_path: Path, env: dict[str, str] | None = None, overrides: dict[str, str] | None = None
) -> Cluster:
    merged = {**SMALL_STORE, **(overrides or {})}
    local = start_local_cluster(str(tmp_path), overrides=merged, env=env)
    return Cluster(tmp_path, local, env, merged)


@pytest.fixture(scope="module", name="cluster")
def module_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for a whole test module, whose tests each use topics and groups of their
    own: a module imports this as its `cluster` fixture (a start and stop is ~3 s a test)."""
    c = start_cluster(tmp_path_factory.mktemp("module"))
    try:
        yield c
    finally:
        c.local.stop()


# ---- an OTLP/HTTP receiver standing in for a tracing backend ------------------------------


@dataclass
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    # (trace id, span id) of each link, hex
    links: list[tuple[str, str]] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)


class OtlpSink:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path == "/v1/traces":  # metrics and logs are taken and dropped
                    request = trace_service_pb2.ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    sink.add(request)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, request: Any) -> None:
        with self._lock:
            for rs in request.resource_spans:
                service = next(
                    (
                        a.value.string_value
                        for a in rs.resource.attributes
                        if a.key == "service.name"
                    ),
                    "",
                )
                resource = {a.key: _any_value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        attrs = {a.key: _any_value(a.value) for a in s.attributes}
                        links = [(ln.trace_id.hex(), ln.span_id.hex()) for ln in s.links]
                        self.spans.append(
                            ReceivedSpan(
                                service,
                                s.name,
                                s.trace_id.hex(),
                                s.span_id.hex(),
                                s.parent_span_id.hex(),
                                s.kind,
                                attrs,
                                links,
                                resource,
                            )
                        )

    def snapshot(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            }
        )
        return env

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _any_value(value: Any) -> Any:
    """An OTLP AnyValue as a Python value (strings, ints, bools, doubles, string arrays)."""
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


class RawClient:
    """A bare DEALER speaking the wire protocol, for sending what no SDK would send."""

    def __init__(self, endpoint: str) -> None:
        import zmq

        from ferry.protocol.framing import RequestCodec

        if "://" not in endpoint:
            endpoint = f"tcp://{endpoint}"
        self._zmq = zmq
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.codec = RequestCodec()
        self._next = 0

    def send_raw(self, frames: list[bytes], timeout_ms: int = 10_000) -> tuple[Any, list[Any]]:
        self.sock.send_multipart(frames)
        if not self.sock.poll(timeout_ms):
            pytest.fail(f"no reply within {timeout_ms / 1000:g} s")
        reply = self.sock.recv_multipart()
        env, payload = self.codec.decode_reply(reply[1:])
        return env, payload

    def call(self, body: Any, payload: list[bytes] | None = None) -> tuple[Any, list[Any]]:
        from ferry.protocol.framing import RequestEnvelope

        self._next += 1
        env, reply_payload = self.send_raw(
            self.codec.request_frames(RequestEnvelope(self._next, body), payload)
        )
        assert env.id == self._next
        return env.body, reply_payload

    def try_call(self, body: Any, timeout_ms: int) -> Any | None:
        """The reply's body, or None when none came within timeout_ms (a service that is
        restarting never answers what its old process took)."""
        from ferry.protocol.framing import RequestEnvelope

        self._next += 1
        self.sock.send_multipart(self.codec.request_frames(RequestEnvelope(self._next, body)))
        if not self.sock.poll(timeout_ms):
            return None
        env, _ = self.codec.decode_reply(self.sock.recv_multipart()[1:])
        return env.body if env.id == self._next else None

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


class LineReader:
    """Reads a child's output on a thread, so that waiting for a line has a deadline."""

    def __init__(self, stream: Any) -> None:
        import queue

        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._stream = stream
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        for line in self._stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for_prefix(self, prefix: str, timeout: float = 60.0) -> str:
        import queue

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no line starting {prefix!r} in {timeout}s:\n" + "\n".join(self.lines))
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                pytest.fail(f"output ended before {prefix!r}:\n" + "\n".join(self.lines))
            self.lines.append(line)
            if line.startswith(prefix):
                return line

    def take(self) -> list[str]:
        """Every line read so far (those waiting are taken in first), without waiting."""
        import queue

        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                return self.lines
            if line is None:
                self._queue.put(None)  # the end stays visible to wait_for_prefix
                return self.lines
            self.lines.append(line)

    def drain(self, timeout: float = 30.0) -> list[str]:
        """The lines not read yet, once the output has ended (the process exited)."""
        import queue

        self._thread.join(timeout)
        rest: list[str] = []
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is None:
                break
            rest.append(line)
        self.lines.extend(rest)
        return rest

    def close(self) -> None:
        self._thread.join(10)
        self._stream.close()


FERRY = str(Path(sys.executable).parent / "ferry")


def live_parents() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process, read from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    return parents


def children_of(pid: int) -> set[int]:
    """Every live descendant of pid, read from /proc."""
    parents = live_parents()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class DevUp:
    """`ferry dev up` as people run it (free ports, a small CommitLog), until READY."""

    def __init__(self, data_dir: Path, *extra: str, timeout: float = 180) -> None:
        argv = [FERRY, "dev", "up", *extra, "--data-dir", str(data_dir)]
        argv += ["--namesrv-port", "0", "--broker-port", "0", "--console-port", "0"]
        argv += ["--set", "mappedFileSizeCommitLog=1048576"]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self.proc.stdout is not None
        self.reader = LineReader(self.proc.stdout)
        # seven processes (or fourteen) start one after another: generous for a loaded machine
        ready = self.reader.wait_for_prefix("READY ", timeout=timeout)
        self.fields = dict(part.split("=", 1) for part in ready.split()[1:])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.reader.close()
