"""A RocketMQ remoting-protocol client for tests and benchmarks: frames built with Ferry's own
codec (ferry.protocol.rocketmq) over a blocking TCP socket, so that tests can send what a
RocketMQ client or tool would (or something no client would) and read the answer."""

from __future__ import annotations

import itertools
import json
import socket
import struct
import time

from ferry.protocol.rocketmq.codes import LanguageCode, SerializeType
from ferry.protocol.rocketmq.command import RemotingCommand, decode, encode

_LENGTH = struct.Struct(">i")


def consumer_heartbeat(client_id: str, group: str, topic: str, expression: str = "*") -> bytes:
    """A push consumer's HEART_BEAT body as the C++ client sends it: enums as numbers, codeSet
    zeros, a newline at the end."""
    beat = {
        "clientID": client_id,
        "consumerDataSet": [
            {
                "consumeFromWhere": 0,
                "consumeType": 1,
                "groupName": group,
                "messageModel": 1,
                "subscriptionDataSet": [
                    {"codeSet": [0], "subString": expression, "subVersion": "1", "topic": topic}
                ],
            }
        ],
    }
    return json.dumps(beat).encode() + b"\n"


class RemotingClient:
    def __init__(self, addr: str, *, timeout_s: float = 10.0) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._opaques = itertools.count(1)
        self._buf = b""
        self.requests_in: list[RemotingCommand] = []  # what the server asked of us

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def send(
        self,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        serialize_type: SerializeType = SerializeType.JSON,
        flag: int = 0,
        language: LanguageCode = LanguageCode.CPP,
    ) -> int:
        """Sends one request; returns its opaque."""
        opaque = next(self._opaques)
        cmd = RemotingCommand(
            code=code,
            language=language,
            opaque=opaque,
            flag=flag,
            ext_fields=dict(ext or {}),
            body=body,
            serialize_type=serialize_type,
        )
        self.sock.sendall(encode(cmd))
        return opaque

    def call(
        self,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        serialize_type: SerializeType = SerializeType.JSON,
        timeout_s: float = 10.0,
        language: LanguageCode = LanguageCode.CPP,
    ) -> RemotingCommand:
        """Sends one request and returns its response (requests the server sends meanwhile
        are kept in requests_in)."""
        opaque = self.send(code, ext, body, serialize_type=serialize_type, language=language)
        deadline = time.monotonic() + timeout_s
        while True:
            cmd = self.receive(max(0.01, deadline - time.monotonic()))
            if cmd is None:
                raise TimeoutError(f"no response to code {code} within {timeout_s} s")
            if cmd.is_response and cmd.opaque == opaque:
                return cmd
            if not cmd.is_response:
                self.requests_in.append(cmd)

    def respond(
        self, request: RemotingCommand, code: int = 0, remark: str = "", body: bytes = b""
    ) -> None:
        """Answers a request the server sent us, as a client answers the broker's asks."""
        self.sock.sendall(encode(request.response(code, remark, body=body)))

    def receive(self, timeout_s: float) -> RemotingCommand | None:
        """The next command from the server; None on timeout. Raises ConnectionError when
        the server closed the connection."""
        deadline = time.monotonic() + timeout_s
        while True:
            if len(self._buf) >= 4:
                (size,) = _LENGTH.unpack_from(self._buf)
                if len(self._buf) >= 4 + size:
                    frame, self._buf = self._buf[4 : 4 + size], self._buf[4 + size :]
                    return decode(frame)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                return None
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self._buf += chunk

    def wait_closed(self, timeout_s: float = 5.0) -> bool:
        """True once the server has closed the connection (anything it sends is dropped)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.sock.recv(1 << 20):
                    return True
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
        return False
