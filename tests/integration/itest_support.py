"""Helpers for cross-service tests: `ferry dev up` and child processes watched from here, and an
OTLP/HTTP sink standing in for a tracing backend. Clusters of real processes, deadline-bounded
waits and the bare wire client come from ferry.runtime.testing (shared with the SDK's and the
services' tests and bench/)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

# Clusters, waits and the wire client are shared with the other suites and bench/: these names
# stay importable from here for the modules of this folder.
from ferry.runtime.testing.cluster import SMALL_STORE, Cluster, start_cluster
from ferry.runtime.testing.pytest_support import RawClient, module_cluster, wait_for

__all__ = [
    "FERRY",
    "SMALL_STORE",
    "Cluster",
    "DevUp",
    "LineReader",
    "OtlpSink",
    "RawClient",
    "ReceivedSpan",
    "alive",
    "children_of",
    "live_parents",
    "module_cluster",
    "start_cluster",
    "wait_for",
]

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
        if "--proxy-port" not in extra:
            argv += ["--proxy-port", "0"]
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
