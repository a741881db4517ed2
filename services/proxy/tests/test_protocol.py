"""ferry.proxy.protocol: the numbers the proxy answers with are the generated modules' own, and
its method table covers every call of MessagingService."""

from __future__ import annotations

import enum

import pytest

from ferry.proxy.protocol import (
    ClientType,
    Code,
    DigestType,
    Encoding,
    MessageType,
    Permission,
    generated_enum,
    methods,
    status,
)

# the generated enums spell their zero values with the enum's name
_SPELLED = {
    ("MessageType", "UNSPECIFIED"): "MESSAGE_TYPE_UNSPECIFIED",
    ("Encoding", "UNSPECIFIED"): "ENCODING_UNSPECIFIED",
}


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (Code, "Code"),
        (MessageType, "MessageType"),
        (Permission, "Permission"),
        (ClientType, "ClientType"),
        (DigestType, "DigestType"),
        (Encoding, "Encoding"),
    ],
)
def test_enums_carry_the_generated_numbers(ours: type[enum.IntEnum], theirs: str) -> None:
    generated = generated_enum(theirs)
    for member in ours:
        name = _SPELLED.get((theirs, member.name), member.name)
        assert generated[name] == member.value, f"{theirs}.{member.name}"


def test_the_method_table_has_every_call_with_its_streaming_shape() -> None:
    table = methods()
    assert {"QueryRoute", "Heartbeat", "SendMessage", "Telemetry", "ReceiveMessage"} <= set(table)
    assert (table["Telemetry"].client_streaming, table["Telemetry"].server_streaming) == (
        True,
        True,
    )
    assert table["ReceiveMessage"].server_streaming
    assert not table["SendMessage"].client_streaming
    assert not table["SendMessage"].server_streaming


def test_every_reply_built_from_the_table_carries_its_status() -> None:
    for method in methods().values():
        reply = method.reply(Code.NOT_IMPLEMENTED, f"{method.name} not served")
        decoded = method.response.FromString(reply.SerializeToString())
        assert decoded.status.code == Code.NOT_IMPLEMENTED
        assert decoded.status.message == f"{method.name} not served"


def test_status_holds_code_and_message() -> None:
    got = status(Code.TOPIC_NOT_FOUND, "no such topic")
    assert (got.code, got.message) == (40402, "no such topic")
