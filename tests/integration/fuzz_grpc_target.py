"""The gRPC proxy's port fuzzed (issue 41.5): bytes that are not HTTP/2 on the TCP port, and
valid gRPC frames carrying malformed or mutated protobuf bodies for every method of
MessagingService (unknown enum values among the mutations), with or without a client id, and
Telemetry streams that never send Settings.

Judged after each input: the call ended within its deadline with a reply that parses and
carries a Status (code not 0), or with a gRPC status other than UNKNOWN (a handler that raised)
or DEADLINE_EXCEEDED (a hang); for non-gRPC bytes, the connection is closed. Then a good call
(QueryRoute of the kept topic) must be answered in time."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import grpc
from fuzz_targets import PING_DEADLINE_S, Finding, Tally
from hypothesis import strategies as st

from ferry.proxy.protocol import SERVICE, Code, Pb, definition, methods, service

CALL_DEADLINE_S = 10.0  # generous: 2 busy cores; a receive's own long poll is capped below it
CLIENT_ID = ("x-mq-client-id", "fuzz@1")
BAD_GRPC = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
METHODS = methods()


def _identity(data: bytes) -> bytes:
    return data


# ---- inputs ------------------------------------------------------------------------------


def samples(topic: str) -> dict[str, list[Pb]]:
    """A well-formed request of each method (what the mutations start from)."""
    d, s = definition, service
    resource = d.Resource(name=topic)
    group = d.Resource(name="cg-fuzz")
    msg = d.Message(topic=resource, body=b"fuzz")
    msg.system_properties.message_id = "01" + "0" * 32
    msg.system_properties.message_type = d.NORMAL
    msg.system_properties.body_encoding = d.IDENTITY
    msg.system_properties.body_digest.type = d.CRC32
    msg.system_properties.body_digest.checksum = "0"
    receive = s.ReceiveMessageRequest(group=group, batch_size=1, auto_renew=False)
    receive.message_queue.topic.CopyFrom(resource)
    receive.message_queue.id = 0
    receive.filter_expression.type = d.TAG
    receive.filter_expression.expression = "*"
    receive.invisible_duration.seconds = 30
    receive.long_polling_timeout.seconds = 1
    settings = d.Settings(client_type=d.PRODUCER)
    settings.publishing.topics.add(name=topic)
    telemetry = s.TelemetryCommand(settings=settings)
    ack = s.AckMessageRequest(group=group, topic=resource)
    ack.entries.add(message_id="01" + "0" * 32, receipt_handle="not-a-handle")
    change = s.ChangeInvisibleDurationRequest(
        group=group, topic=resource, receipt_handle="not-a-handle", message_id="01" + "0" * 32
    )
    change.invisible_duration.seconds = 5
    out: dict[str, list[Pb]] = {name: [m.request()] for name, m in METHODS.items()}
    out["QueryRoute"].append(s.QueryRouteRequest(topic=resource))
    out["Heartbeat"].append(s.HeartbeatRequest(group=group, client_type=d.PUSH_CONSUMER))
    out["SendMessage"].append(s.SendMessageRequest(messages=[msg]))
    out["QueryAssignment"].append(s.QueryAssignmentRequest(topic=resource, group=group))
    out["ReceiveMessage"].append(receive)
    out["AckMessage"].append(ack)
    out["ChangeInvisibleDuration"].append(change)
    out["NotifyClientTermination"].append(s.NotifyClientTerminationRequest(group=group))
    out["Telemetry"].append(telemetry)
    return out


def _enum_fields(message: Pb, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Pb]]:
    """(path, field descriptor) of every enum field reachable in message's type (one level of
    repeated or nested messages deep enough for the requests' own enums)."""
    for fd in message.DESCRIPTOR.fields:
        if fd.enum_type is not None and not fd.is_repeated:
            yield (*path, fd.name), fd
        elif fd.message_type is not None and not fd.is_repeated and len(path) < 3:
            yield from _enum_fields(getattr(message, fd.name), (*path, fd.name))


def with_enum(message: Pb, path: tuple[str, ...], value: int) -> bytes:
    """message's bytes with the enum at path set to value (any int32: unknown ones too)."""
    copy = type(message)()
    copy.CopyFrom(message)
    target = copy
    for name in path[:-1]:
        target = getattr(target, name)
    setattr(target, path[-1], value)
    return bytes(copy.SerializeToString())


def _mutated(data: bytes, cuts: list[int], flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for at, bit in flips:
        if out:
            out[at % len(out)] ^= 1 << (bit % 8)
    for cut in cuts:
        if out:
            del out[cut % len(out) :]
    return bytes(out)


def grpc_inputs(topic: str) -> st.SearchStrategy[tuple[str, bytes, bool]]:
    """(method, body, with client id): random bytes, mutated samples, unknown enum values."""
    base = samples(topic)
    names = sorted(METHODS)
    enum_cases = [
        (name, sample, path)
        for name in names
        for sample in base[name]
        for path, _ in _enum_fields(sample)
    ]
    random_bodies = st.tuples(st.sampled_from(names), st.binary(max_size=200), st.booleans())
    mutated = st.builds(
        lambda name, i, cuts, flips, cid: (
            name,
            _mutated(base[name][i % len(base[name])].SerializeToString(), cuts, flips),
            cid,
        ),
        st.sampled_from(names),
        st.integers(0, 3),
        st.lists(st.integers(0, 400), max_size=1),
        st.lists(st.tuples(st.integers(0, 400), st.integers(0, 7)), max_size=3),
        st.booleans(),
    )
    enums = st.builds(
        lambda case, value, cid: (case[0], with_enum(case[1], case[2], value), cid),
        st.sampled_from(enum_cases),
        st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(5, 40)),
        st.booleans(),
    )
    return st.one_of(random_bodies, mutated, enums)


def tcp_garbage() -> st.SearchStrategy[bytes]:
    """Bytes on the TCP port that are not a well-formed HTTP/2 connection."""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    return st.one_of(
        st.binary(max_size=300),
        st.builds(lambda tail: preface + tail, st.binary(max_size=200)),
        st.sampled_from([b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00" * 64, preface[:10]]),
    )


# ---- the target --------------------------------------------------------------------------


class GrpcTarget:
    """One channel to the proxy for the fuzzed calls, another for the good call after each."""

    def __init__(self, addr: str, topic: str) -> None:
        self.addr = addr
        self.topic = topic
        self.tally = Tally()
        self.codes: dict[str, set[int]] = {}
        self.channel = grpc.insecure_channel(addr)
        self._probe_channel = grpc.insecure_channel(addr)

    def _path(self, name: str) -> str:
        return f"/{SERVICE}/{name}"

    def call(self, name: str, body: bytes, with_client_id: bool = True) -> bool:
        """One fuzzed call of `name` with `body` as its request's bytes; then the good call."""
        method = METHODS[name]
        self.tally.sent += 1
        metadata = (CLIENT_ID,) if with_client_id else ()
        sent = (name, body[:200], with_client_id)
        path = self._path(name)
        replies: list[bytes] = []
        try:
            if method.client_streaming:
                stub = self.channel.stream_stream(path, _identity, _identity)
                replies = list(stub(iter([body]), timeout=CALL_DEADLINE_S, metadata=metadata))
            elif method.server_streaming:
                stub_s = self.channel.unary_stream(path, _identity, _identity)
                replies = list(stub_s(body, timeout=CALL_DEADLINE_S, metadata=metadata))
            else:
                stub_u = self.channel.unary_unary(path, _identity, _identity)
                replies = [stub_u(body, timeout=CALL_DEADLINE_S, metadata=metadata)]
        except grpc.RpcError as err:
            code = err.code()
            if code in BAD_GRPC:
                self._find(f"gRPC {code.name}", str(err.details()), sent)
            else:
                self.tally.errors += 1
            return self.healthy(sent)
        for raw in replies:
            self._judge(method, raw, sent)
        return self.healthy(sent)

    def _judge(self, method: Any, raw: bytes, sent: Any) -> None:
        try:
            reply = method.response.FromString(raw)
        except Exception as exc:  # noqa: BLE001 - a reply that does not parse is a finding
            self._find("bad reply", f"{type(exc).__name__}: {exc}", sent)
            return
        if (method.client_streaming or method.server_streaming) and not reply.HasField("status"):
            # a stream's other replies: Telemetry's Settings, ReceiveMessage's messages
            self.tally.replies += 1
            return
        code = int(reply.status.code)
        self.codes.setdefault(method.name, set()).add(code)
        if code == 0:
            self._find("no status", "a reply with Status code 0", sent)
        elif code in (Code.INTERNAL_ERROR, Code.INTERNAL_SERVER_ERROR):
            self._find("internal error", reply.status.message, sent)
        elif code == Code.OK:
            self.tally.replies += 1
        else:
            self.tally.errors += 1

    def raw(self, data: bytes) -> bool:
        """Bytes that are not gRPC on a fresh TCP connection: the proxy closes it."""
        self.tally.sent += 1
        host, _, port = self.addr.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=PING_DEADLINE_S) as s:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
        except TimeoutError:
            self._find("not closed", "garbage left the connection open", ("raw", data[:200]))
        except OSError:
            pass  # a reset is a clean enough close
        return self.healthy(("raw", data[:200]))

    def silent_telemetry(self, commands: list[bytes]) -> bool:
        """A Telemetry stream that sends `commands` (no Settings among them) and half-closes:
        it must end with a Status."""
        self.tally.sent += 1
        method = METHODS["Telemetry"]
        stub = self.channel.stream_stream(self._path("Telemetry"), _identity, _identity)
        sent = ("Telemetry without Settings", commands)
        try:
            replies = list(stub(iter(commands), timeout=CALL_DEADLINE_S, metadata=(CLIENT_ID,)))
        except grpc.RpcError as err:
            self._find(f"gRPC {err.code().name}", str(err.details()), sent)
            return self.healthy(sent)
        statuses = [method.response.FromString(r) for r in replies]
        if not any(r.HasField("status") and r.status.code != Code.OK for r in statuses):
            self._find("no status", f"{len(replies)} replies, none a refusal", sent)
        else:
            self.tally.errors += 1
        return self.healthy(sent)

    def healthy(self, after: Any = None) -> bool:
        """The good call: QueryRoute of the kept topic answered OK with its queues in time."""
        stub = self._probe_channel.unary_unary(
            self._path("QueryRoute"),
            lambda m: m.SerializeToString(),
            service.QueryRouteResponse.FromString,
        )
        try:
            reply = stub(
                service.QueryRouteRequest(topic=definition.Resource(name=self.topic)),
                timeout=PING_DEADLINE_S,
                metadata=(CLIENT_ID,),
            )
        except grpc.RpcError as err:
            self._find("unhealthy", f"QueryRoute: {err.code().name} {err.details()}", after)
            return False
        if reply.status.code != Code.OK or not reply.message_queues:
            self._find("unhealthy", f"QueryRoute: {reply.status}", after)
            return False
        return True

    def _find(self, kind: str, detail: str, sent: Any) -> None:
        self.tally.findings.append(Finding("proxy", kind, detail[:400], sent))

    def close(self) -> None:
        self.channel.close()
        self._probe_channel.close()
