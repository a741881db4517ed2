"""`ferry serve broker` as a supervised process tree for the supervision tests: start it,
find its services' pids in /proc, kill one, read the supervisor's lines."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from itest_support import FERRY, DevUp, LineReader, alive, live_parents, wait_for

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    FerryError,
    Message,
    Producer,
    PushConsumer,
    SendResult,
    SendStatus,
)
from ferry.protocol.messages import (
    AnyReply,
    AnyRequest,
    HaStatusReply,
    HaStatusRequest,
    PingRequest,
    PongReply,
    TransactionCheckStatusReply,
    TransactionCheckStatusRequest,
)
from ferry.protocol.rpc import BlockingClient

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
        self.addr = ready.split("addr=", 1)[1].split()[0]  # `… ha=…` follows

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
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            tail = "\n".join(self.reader.lines[-40:])
            raise AssertionError(f"the tree did not stop within 60 s of SIGTERM:\n{tail}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.reader.close()


# ---- faults under load (issue 25.6): test_faults_under_load.py and bench/faults_under_load.py


def dev_kinds(dev: DevUp) -> dict[str, int]:
    """kind -> pid of each service the running `ferry dev up` started, read from /proc (its
    children and the module each runs), so that a kind added to the launcher is covered.
    A slave group's services (`--slave`) are `<kind>-slave`, as the supervisor names them."""
    from ferry.runtime.launcher import MODULES as LAUNCHED

    by_module = {module: kind for kind, module in LAUNCHED.items()}
    found: dict[str, int] = {}
    for pid, ppid in live_parents().items():
        if ppid != dev.proc.pid:
            continue
        args = cmdline(pid)
        module = args[args.index("-m") + 1] if "-m" in args[:-1] else ""
        assert module in by_module, f"child {pid} runs {args}: not a service the launcher knows"
        slave = "-slave" if any(a.endswith("brokerRole=SLAVE") for a in args) else ""
        found[by_module[module] + slave] = pid
    return found


# the kinds issue 25.6 names, in its order: the faults go through them so
FAULT_ORDER = (
    "broker-store",
    "broker-remoting",
    "index",
    "scheduler",
    "checkback",
    "ha-replicator",
    "namesrv",
    "console",
)


def fault_order(kinds: Iterable[str]) -> list[str]:
    """The running kinds in FAULT_ORDER, any other kind (one added since) after them."""
    running = set(kinds)
    return [k for k in FAULT_ORDER if k in running] + sorted(running - set(FAULT_ORDER))


def listening(dev: DevUp, kind: str) -> dict[str, str]:
    """The fields (endpoint=, addr=, url=) of the last `[kind] listening` line."""
    for line in reversed(dev.reader.lines):
        if line.startswith(f"[{kind}] listening "):
            return dict(p.split("=", 1) for p in line.split()[2:] if "=" in p)
    raise AssertionError(f"{kind} printed no listening line")


def error_kind(exc: BaseException) -> str:
    """What a failed send counts as: its FerryError subclass, or UNTYPED:<class> for anything
    else (which the fault tests refuse)."""
    return type(exc).__name__ if isinstance(exc, FerryError) else f"UNTYPED:{type(exc).__name__}"


@dataclass
class LoadFigures:
    acked: set[bytes] = field(default_factory=set)  # SEND_OK under SYNC_FLUSH: must be consumed
    failed: collections.Counter[str] = field(default_factory=collections.Counter)
    untyped: list[str] = field(default_factory=list)  # repr of each non-FerryError failure
    slowest_send_s: float = 0.0  # longest sync send
    slowest_async_s: float = 0.0  # longest send_async, from the call to its future's end
    sends: int = 0


class FaultLoad:
    """Producers and a consumer group running against a cluster all along: sync sends from
    two threads, send_async from a third (a bounded number in flight), and a PushConsumer
    group reading the topic from its start. Every SEND_OK body is remembered; every failure
    is counted by its type."""

    def __init__(
        self,
        namesrv: str,
        topic: str,
        *,
        send_timeout_ms: int = 3000,
        sync_threads: int = 2,
        async_in_flight: int = 32,
        pace_s: float = 0.002,
    ) -> None:
        from consume_support import Received

        self.namesrv = namesrv
        self.topic = topic
        self.send_timeout_s = send_timeout_ms / 1000
        self.figures = LoadFigures()
        self.received = Received()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pace_s = pace_s
        self._in_flight = threading.BoundedSemaphore(async_in_flight)
        self.producer = Producer("pg-faults", namesrv, send_timeout_ms=send_timeout_ms)
        self.consumer = PushConsumer(
            "cg-faults",
            namesrv,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
            consume_thread_nums=4,
            pull_batch_size=64,
        )
        self.consumer.subscribe(topic, "*")
        self.consumer.register_listener(self.received.listener())
        self._threads = [
            threading.Thread(target=self._sync_loop, args=(f"s{n}",), daemon=True)
            for n in range(sync_threads)
        ]
        self._threads.append(threading.Thread(target=self._async_loop, daemon=True))

    def start(self) -> None:
        self.producer.start()
        self.consumer.start()
        for thread in self._threads:
            thread.start()

    def acked(self) -> int:
        with self._lock:
            return len(self.figures.acked)

    def wait_acked_more(self, more: int, what: str, timeout: float = 60) -> None:
        """Waits until `more` sends beyond those acknowledged now are acknowledged."""
        target = self.acked() + more
        wait_for(lambda: self.acked() >= target, timeout, f"{more} sends acknowledged {what}")

    def _done(
        self,
        body: bytes,
        took: float,
        result: SendResult | None,
        exc: BaseException | None,
    ) -> None:
        with self._lock:
            self.figures.sends += 1
            if body.startswith(b"a-"):
                self.figures.slowest_async_s = max(self.figures.slowest_async_s, took)
            else:
                self.figures.slowest_send_s = max(self.figures.slowest_send_s, took)
            if exc is not None:
                kind = error_kind(exc)
                self.figures.failed[kind] += 1
                if kind.startswith("UNTYPED:"):
                    self.figures.untyped.append(repr(exc))
            elif result is not None and result.status == SendStatus.SEND_OK:
                self.figures.acked.add(body)
            elif result is not None:  # stored, but not as SYNC_FLUSH promises
                self.figures.failed[result.status.name] += 1

    def _message(self, body: bytes) -> Message:
        return Message(self.topic, body, keys=[body.decode()])

    def _sync_loop(self, name: str) -> None:
        i = 0
        while not self._stop.is_set():
            body = f"{name}-{i}".encode()
            i += 1
            began = time.monotonic()
            try:
                result = self.producer.send(self._message(body))
            except Exception as exc:  # noqa: BLE001 - counted by type; untyped ones fail the test
                self._done(body, time.monotonic() - began, None, exc)
            else:
                self._done(body, time.monotonic() - began, result, None)
            self._stop.wait(self._pace_s)

    def _async_loop(self) -> None:
        i = 0
        while not self._stop.is_set():
            if not self._in_flight.acquire(timeout=0.1):
                continue
            body = f"a-{i}".encode()
            i += 1
            began = time.monotonic()
            try:
                future = self.producer.send_async(self._message(body))
            except Exception as exc:  # noqa: BLE001 - as in _sync_loop
                self._in_flight.release()
                self._done(body, time.monotonic() - began, None, exc)
                continue

            def done(f: Future[SendResult], body: bytes = body, began: float = began) -> None:
                self._in_flight.release()
                exc = f.exception()
                self._done(body, time.monotonic() - began, None if exc else f.result(), exc)

            future.add_done_callback(done)
            self._stop.wait(self._pace_s)

    def stop_sending(self) -> None:
        """Stops the producers and waits for every async send to complete."""
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        for _ in range(self._in_flight._initial_value):  # type: ignore[attr-defined]
            assert self._in_flight.acquire(timeout=self.send_timeout_s * 3 + 10), "async stuck"

    def missing(self, also: Iterable[bytes] = ()) -> set[bytes]:
        """Acknowledged bodies (and `also`'s) the consumer group has not received (yet)."""
        got = set(self.received.bodies())
        with self._lock:
            return (self.figures.acked | set(also)) - got

    def wait_consumed(self, also: Iterable[bytes] = (), timeout: float = 90) -> set[bytes]:
        """Waits until the group has received every body acknowledged so far (and also's);
        returns those it still has not at the deadline."""
        want = set(also)
        deadline = time.monotonic() + timeout
        while (lost := self.missing(want)) and time.monotonic() < deadline:
            time.sleep(0.1)  # wait-ok: polling interval of a deadline-bounded wait
        return lost

    def summary(self) -> str:
        figures = self.figures
        return (
            f"acked {len(figures.acked)} of {figures.sends} sends, failed "
            f"{dict(figures.failed)}, duplicates consumed {self.received.duplicates()}, "
            f"slowest send {figures.slowest_send_s:.2f} s, slowest send_async "
            f"{figures.slowest_async_s:.2f} s, untyped errors {figures.untyped[:3]}"
        )

    def close(self) -> None:
        self._stop.set()
        for closing in (self.producer.shutdown, self.consumer.shutdown):
            with contextlib.suppress(Exception):
                closing()


@dataclass
class Probes:
    """One request per kind of service that only that service answers, as clients make it."""

    dev: DevUp
    topic: str
    key: str  # a key acknowledged before the faults: the index must find it

    def __post_init__(self) -> None:
        namesrv = self.dev.fields["namesrv"]
        self.producer = Producer("pg-faults-probe", namesrv, send_timeout_ms=1000, retry_times=0)
        self.producer.start()
        self.acked: list[bytes] = []
        self._n = 0

    def serving(self, kind: str) -> bool:
        check = {
            "broker-store": self._send,
            "broker-remoting": self._send,
            "index": self._query_by_key,
            "scheduler": self._scheduler_status,
            "namesrv": self._route,
            "console": self._console_page,
            "proxy": self._proxy_route,
        }.get(kind)
        if check is not None:
            return check()
        fields = listening(self.dev, kind)
        endpoint = fields.get("endpoint") or f"tcp://{fields['addr']}"
        request: AnyRequest = PingRequest()
        reply: type[AnyReply] = PongReply
        if kind == "checkback":
            request, reply = TransactionCheckStatusRequest(), TransactionCheckStatusReply
        elif kind == "ha-replicator":
            request, reply = HaStatusRequest(), HaStatusReply
        with BlockingClient(endpoint) as client:
            answer = client.call(request, 500)
        return answer is not None and isinstance(answer[0], reply)

    def _send(self) -> bool:
        self._n += 1
        body = f"probe-{self._n}".encode()
        try:
            ok = self.producer.send(Message(self.topic, body)).status == SendStatus.SEND_OK
        except FerryError:
            return False
        if ok:
            self.acked.append(body)
        return ok

    def _admin(self) -> Admin:
        return Admin(self.dev.fields["namesrv"], timeout_ms=1000)

    def _query_by_key(self) -> bool:
        try:
            with self._admin() as admin:
                return bool(admin.query_msg_by_key(self.topic, self.key))
        except FerryError:
            return False

    def _scheduler_status(self) -> bool:
        try:
            with self._admin() as admin:
                return admin.scheduler_status(self.dev.fields["broker"]) is not None
        except FerryError:
            return False

    def _route(self) -> bool:
        """A new client gets the topic's route: the name server answers and the broker has
        registered with the restarted one."""
        try:
            with self._admin() as admin:
                return bool(admin.topic_route(self.topic).queue_datas)
        except FerryError:
            return False

    def _console_page(self) -> bool:
        try:
            with urllib.request.urlopen(self.dev.fields["console"], timeout=1) as page:
                return bool(page.status == 200)
        except OSError:
            return False

    def _proxy_route(self) -> bool:
        """The gRPC proxy answers a QueryRoute of the topic with its route."""
        from ferry.proxy.protocol import Code, service

        method = "/apache.rocketmq.v2.MessagingService/QueryRoute"
        request = service.QueryRouteRequest()
        request.topic.name = self.topic
        with grpc.insecure_channel(listening(self.dev, "proxy")["grpc"]) as channel:
            call = channel.unary_unary(
                method,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=service.QueryRouteResponse.FromString,
            )
            try:
                reply = call(request, timeout=2)
            except grpc.RpcError:
                return False
        return bool(reply.status.code == Code.OK and reply.message_queues)

    def close(self) -> None:
        self.producer.shutdown()


@dataclass
class Recovery:
    kind: str
    to_ready_s: float  # kill -9 to the supervisor's `is back` line (the new process's READY)
    to_serving_s: float  # kill -9 to the first answer of its probe


def kill_under_load(dev: DevUp, probes: Probes, kind: str, timeout: float = 60) -> Recovery:
    """kill -9 of the dev up's `kind`; waits for it to be back and serving."""
    pid = dev_kinds(dev)[kind]
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    said = dev.reader.wait_for_prefix(f"[supervisor] {kind} (pid {pid}) exited", timeout)
    assert "exited with SIGKILL; restarting in " in said, said
    back = dev.reader.wait_for_prefix(f"[supervisor] {kind} is back", timeout)
    ready = time.monotonic() - killed
    assert dev_kinds(dev)[kind] == int(back.rsplit("pid ", 1)[1].rstrip(")"))
    deadline = killed + timeout
    while not probes.serving(kind):
        assert time.monotonic() < deadline, f"{kind} back but not serving within {timeout} s"
        time.sleep(0.02)  # wait-ok: polling interval of a deadline-bounded wait
    return Recovery(kind, ready, time.monotonic() - killed)


def read_now(reader: LineReader) -> list[str]:
    """The lines a running child printed since they were last read, without waiting."""
    import queue

    new: list[str] = []
    while True:
        try:
            line = reader._queue.get_nowait()
        except queue.Empty:
            break
        if line is None:
            break
        new.append(line)
    reader.lines.extend(new)
    return new


@dataclass
class Hang:
    kind: str
    failed: collections.Counter[str]  # sends that failed while it was stopped, by type
    acked_during: int
    to_serving_s: float  # SIGCONT to the first answer of its probe
    replaced: bool  # the supervisor put another process in its place
    supervisor_said: list[str]  # the supervisor's lines about it meanwhile


def stop_under_load(dev: DevUp, load: FaultLoad, probes: Probes, kind: str, seconds: float) -> Hang:
    """SIGSTOP of the dev up's `kind` for `seconds`, then SIGCONT; waits for it to serve."""
    pid = dev_kinds(dev)[kind]
    failed_before = collections.Counter(load.figures.failed)
    acked_before = load.acked()
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)  # wait-ok: the stop is the fault itself
        acked_during = load.acked() - acked_before
        failed = collections.Counter(load.figures.failed)
    finally:
        os.kill(pid, signal.SIGCONT)
    resumed = time.monotonic()
    wait_for(lambda: probes.serving(kind), 60, f"{kind} serving after SIGCONT")
    to_serving = time.monotonic() - resumed
    said = [ln for ln in read_now(dev.reader) if ln.startswith(f"[supervisor] {kind}")]
    failed.subtract(failed_before)
    return Hang(kind, +failed, acked_during, to_serving, dev_kinds(dev).get(kind) != pid, said)


def unread_at(dev: DevUp, server: str, client: str) -> int:
    """Bytes that `client`'s TCP connections to `server` (services of the dev up) have sent
    and `server` has not read yet: what a stopped service leaves in its sockets."""
    port = int(
        (listening(dev, server).get("endpoint") or listening(dev, server)["addr"]).rsplit(":", 1)[1]
    )
    pid = dev_kinds(dev)[client]
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]

    def port_of(address: str) -> int:
        return int(address.rsplit(":", 1)[1], 16)

    theirs = {port_of(r[1]) for r in rows if r[9] in inodes and port_of(r[2]) == port}
    return sum(
        int(r[4].split(":")[1], 16)
        for r in rows
        if port_of(r[1]) == port and port_of(r[2]) in theirs
    )
