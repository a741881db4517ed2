"""RocketMQ's classic remoting protocol (4.x clients): codes, RemotingCommand and its two
header serializations, and the splitting of a TCP byte stream into frames. Pure, no I/O."""

from ferry.protocol.rocketmq.codes import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from ferry.protocol.rocketmq.command import CommandError, RemotingCommand, decode, encode
from ferry.protocol.rocketmq.frames import DEFAULT_MAX_FRAME_SIZE, FrameSplitter

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "ONEWAY_FLAG",
    "RESPONSE_FLAG",
    "CommandError",
    "FrameSplitter",
    "LanguageCode",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "decode",
    "encode",
]
