"""RocketMQ's remoting protocol numbers: request and response codes, languages, serializations,
flag bits.

The request and response codes are Ferry's own (ferry.protocol.codes): Ferry's wire uses
RocketMQ's numbers and names, and that table holds all of RocketMQ's (ROCKETMQ.md §3), since a
RocketMQ client or tool may send any of them and the door must name what it refuses, beside
Ferry's own codes at 10000 and above, which the door never serves.
"""

from __future__ import annotations

from enum import IntEnum

from ferry.protocol.codes import RequestCode, ResponseCode

__all__ = [
    "ONEWAY_FLAG",
    "RESPONSE_FLAG",
    "LanguageCode",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
]

# flag bits of a RemotingCommand
RESPONSE_FLAG = 0b01  # bit 0: this command is a response
ONEWAY_FLAG = 0b10  # bit 1: the request expects no response


class SerializeType(IntEnum):
    """The header's serialization, carried in the high byte of the header-length field."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(IntEnum):
    """The sender's language: a name in JSON headers, a byte in ROCKETMQ binary headers."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13
