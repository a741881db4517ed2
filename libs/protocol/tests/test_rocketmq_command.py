"""RemotingCommand encode/decode in both header serializations, and every way a frame can be
malformed raising CommandError."""

from __future__ import annotations

import json
import struct

import pytest

from ferry.protocol.rocketmq import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    CommandError,
    LanguageCode,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    decode,
    encode,
)

SEND_EXT = {
    "producerGroup": "PG",
    "topic": "T1",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "queueId": "2",
    "sysFlag": "0",
    "bornTimestamp": "1764686400000",
    "flag": "0",
    "properties": "KEYS\x01k1\x02TAGS\x01TagA\x02",
    "reconsumeTimes": "0",
    "unitMode": "false",
    "batch": "false",
}


def _send(serialize_type: SerializeType) -> RemotingCommand:
    return RemotingCommand(
        code=RequestCode.SEND_MESSAGE,
        language=LanguageCode.CPP,
        version=63,
        opaque=41,
        remark="é remark",
        ext_fields=dict(SEND_EXT),
        body=bytes(range(128)),
        serialize_type=serialize_type,
    )


def _frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    """A frame after its total length, with the header as given."""
    return struct.pack(">I", (kind << 24) | len(header)) + header + body


@pytest.mark.parametrize("kind", list(SerializeType))
def test_round_trip_keeps_every_field(kind: SerializeType) -> None:
    cmd = _send(kind)
    frame = encode(cmd)
    (total,) = struct.unpack_from(">i", frame)
    assert total == len(frame) - 4
    assert frame[4] == kind  # the high byte of the header length
    assert decode(frame[4:]) == cmd
    assert decode(memoryview(frame)[4:]) == cmd


@pytest.mark.parametrize("kind", list(SerializeType))
def test_round_trip_of_empty_command(kind: SerializeType) -> None:
    cmd = RemotingCommand(code=0, serialize_type=kind)
    assert decode(encode(cmd)[4:]) == cmd


def test_json_header_as_the_cpp_client_sends_it_with_a_newline() -> None:
    header = (
        b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"c2ln",'
        b'"topic":"T1"},"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}\n'
    )
    cmd = decode(_frame(header))
    assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    assert cmd.language is LanguageCode.CPP
    assert cmd.version == 63
    assert cmd.opaque == 0
    assert cmd.ext_fields["topic"] == "T1"
    assert cmd.ext_fields["AccessKey"] == ""
    assert cmd.body == b""
    assert cmd.serialize_type is SerializeType.JSON
    assert not cmd.is_response and not cmd.is_oneway


def test_ext_values_that_are_numbers_or_booleans_decode_to_strings() -> None:
    header = json.dumps(
        {"code": 10, "extFields": {"queueId": 3, "ratio": 1.5, "unitMode": False, "gone": None}}
    ).encode()
    cmd = decode(_frame(header))
    assert cmd.ext_fields == {"queueId": "3", "ratio": "1.5", "unitMode": "false"}


def test_ext_values_are_encoded_as_json_strings() -> None:
    # a client reads a JSON number in extFields as 0: nextBeginOffset 0 made it re-pull forever
    cmd = RemotingCommand(code=0, ext_fields={"nextBeginOffset": 17, "ok": True})  # type: ignore[dict-item]
    header = encode(cmd)[8:]
    assert json.loads(header)["extFields"] == {"nextBeginOffset": "17", "ok": "true"}


def test_json_header_always_carries_ext_fields_and_remark() -> None:
    # the C++ client segfaults on a send reply whose header has no extFields key at all
    header = json.loads(encode(RemotingCommand(code=0, flag=RESPONSE_FLAG))[8:])
    assert header["extFields"] == {}
    assert header["remark"] == ""
    assert header["flag"] == RESPONSE_FLAG


def test_json_header_says_its_serialization_as_java_writes_it() -> None:
    # rocketmq-client-rust drops every answer whose header lacks serializeTypeCurrentRPC
    header = json.loads(encode(RemotingCommand(code=0, flag=RESPONSE_FLAG))[8:])
    assert header["serializeTypeCurrentRPC"] == "JSON"


def test_json_header_names_the_language_and_missing_fields_take_defaults() -> None:
    frame = encode(RemotingCommand(code=0, language=LanguageCode.NODE_JS))
    assert json.loads(frame[8:])["language"] == "NODE_JS"
    cmd = decode(_frame(b'{"code":17}', b"body"))
    assert cmd == RemotingCommand(code=17, body=b"body")


def test_unknown_language_decodes_as_other() -> None:
    assert decode(_frame(b'{"code":1,"language":"COBOL"}')).language is LanguageCode.OTHER
    assert decode(_frame(b'{"code":1,"language":3}')).language is LanguageCode.PYTHON
    binary = encode(RemotingCommand(code=1, serialize_type=SerializeType.ROCKETMQ))
    patched = bytearray(binary)
    patched[8 + 2] = 99  # the language byte after the int16 code
    assert decode(bytes(patched[4:])).language is LanguageCode.OTHER


def test_binary_header_layout_byte_by_byte() -> None:
    cmd = RemotingCommand(
        code=34,
        language=LanguageCode.JAVA,
        version=317,
        opaque=7,
        flag=ONEWAY_FLAG,
        remark="hi",
        ext_fields={"k": "vv"},
        body=b"B",
        serialize_type=SerializeType.ROCKETMQ,
    )
    header = (
        struct.pack(">hbhii", 34, 0, 317, 7, 2)
        + struct.pack(">i", 2)
        + b"hi"
        + struct.pack(">i", 2 + 1 + 4 + 2)
        + struct.pack(">h", 1)
        + b"k"
        + struct.pack(">i", 2)
        + b"vv"
    )
    expected = struct.pack(">ii", 4 + len(header) + 1, (1 << 24) | len(header)) + header + b"B"
    assert encode(cmd) == expected
    assert decode(expected[4:]) == cmd


def test_binary_header_ignores_bytes_after_the_ext_fields() -> None:
    frame = bytearray(encode(RemotingCommand(code=5, serialize_type=SerializeType.ROCKETMQ)))
    header_len = len(frame) - 8
    padded = _frame(bytes(frame[8:]) + b"\x00\x00", b"body", kind=1)
    assert header_len == 21
    assert decode(padded).body == b"body"


def test_response_echoes_opaque_sets_flag_and_keeps_serialization() -> None:
    request = _send(SerializeType.ROCKETMQ)
    reply = request.response(ResponseCode.SUCCESS, ext_fields={"msgId": "AB", "queueId": "2"})
    assert reply.opaque == 41
    assert reply.flag == RESPONSE_FLAG
    assert reply.is_response and not reply.is_oneway
    assert reply.serialize_type is SerializeType.ROCKETMQ
    assert reply.ext_fields == {"msgId": "AB", "queueId": "2"}
    back = decode(encode(reply)[4:])
    assert back.is_response and back.opaque == 41 and back.code == 0


def test_oneway_flag() -> None:
    cmd = decode(encode(RemotingCommand(code=40, flag=ONEWAY_FLAG))[4:])
    assert cmd.is_oneway and not cmd.is_response


# -- malformed input: one error type, a message saying what is wrong --


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        (b"", "no header length"),
        (b"\x00\x00", "no header length"),
        (struct.pack(">i", 10) + b"{}", "beyond the frame"),
        (struct.pack(">i", 0xFFFFFF) + b"x", "beyond the frame"),
        (_frame(b'{"code":1}', kind=2), "serialize type 2"),
        (_frame(b'{"code":1}', kind=0xFF), "serialize type 255"),
        (_frame(b'{"code":1'), "bad JSON"),
        (_frame(b""), "bad JSON"),
        (_frame(b"\xff\xfe"), "bad JSON"),
        (_frame(b"[1,2]"), "bad JSON"),
        (_frame(b'{"flag":0}'), "bad JSON"),  # code is required
        (_frame(b'{"code":"10"}'), "bad JSON"),
        (_frame(b'{"code":true}'), "bad JSON"),
        (_frame(b'{"code":1,"opaque":1.5}'), "bad JSON"),
        (_frame(b'{"code":4294967296}'), "bad JSON"),
        (_frame(b'{"code":1,"extFields":[]}'), "bad JSON"),
        (_frame(b'{"code":1,"extFields":{"a":{"b":1}}}'), "bad JSON"),
        (_frame(b'{"code":1,"extFields":{"a":[1]}}'), "bad JSON"),
        (_frame(b'{"code":1,"remark":5}'), "bad JSON"),
        (_frame(b'{"code":1,"remark":"\xff"}'), "bad JSON"),
        (_frame(b'{"code":1,"extFields":{"a":"\xc3("}}'), "bad JSON"),
        (_frame(b'{"code":1,"language":null}'), "bad JSON"),
        (_frame(b"\x00" * 20, kind=1), "shorter than its fixed part"),
    ],
)
def test_malformed_frame_raises_command_error(frame: bytes, says: str) -> None:
    with pytest.raises(CommandError, match=says):
        decode(frame)


def _binary(remark_len: int, remark: bytes, ext_len: int, ext: bytes) -> bytes:
    header = (
        struct.pack(">hbhii", 10, 0, 0, 0, 0)
        + struct.pack(">i", remark_len)
        + remark
        + struct.pack(">i", ext_len)
        + ext
    )
    return _frame(header, kind=1)


def _field(
    key: bytes, value: bytes, key_len: int | None = None, value_len: int | None = None
) -> bytes:
    return (
        struct.pack(">h", len(key) if key_len is None else key_len)
        + key
        + struct.pack(">i", len(value) if value_len is None else value_len)
        + value
    )


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        (_binary(-1, b"", 0, b""), "remark length -1"),
        (_binary(50, b"short", 0, b""), "remark length 50"),
        (_binary(2, b"\xff\xff", 0, b""), "remark is not UTF-8"),
        (_binary(0, b"", -5, b""), "ext fields length -5"),
        (_binary(0, b"", 100, b""), "ext fields length 100"),
        (_binary(0, b"", 1, b"\x00"), "truncated in the length of the ext field name"),
        (
            _binary(0, b"", 2 + 1 + 2, _field(b"k", b"")[:5]),
            "truncated in the length of the ext field 'k'",
        ),
        (_binary(0, b"", 8, _field(b"k", b"v", key_len=-2)), "ext field name length -2"),
        (_binary(0, b"", 8, _field(b"k", b"v", value_len=-1)), "ext field 'k' length -1"),
        (_binary(0, b"", 8, _field(b"k", b"v", value_len=9)), "ext field 'k' length 9"),
        (_binary(0, b"", 7, _field(b"k", b"v") + b"!"), "ext field 'k' length 1"),  # runs past ext
        (_binary(0, b"", 8, _field(b"\xc3", b"v")), "ext field name is not UTF-8"),
        (_binary(0, b"", 8, _field(b"k", b"\xff")), "ext field 'k' is not UTF-8"),
        (_binary(0, b"", 0, b"")[:-1], "beyond the frame"),
    ],
)
def test_malformed_binary_header_raises_command_error(frame: bytes, says: str) -> None:
    with pytest.raises(CommandError, match=says):
        decode(frame)


@pytest.mark.parametrize(
    "cmd",
    [
        RemotingCommand(code=200050, serialize_type=SerializeType.ROCKETMQ),  # int16 code
        RemotingCommand(code=1, version=1 << 20, serialize_type=SerializeType.ROCKETMQ),
        RemotingCommand(code=1 << 40),
        RemotingCommand(code=1, opaque=-(1 << 33)),
        RemotingCommand(code=1, language=99),  # type: ignore[arg-type]
        RemotingCommand(code=1, ext_fields={"a": [1]}),  # type: ignore[dict-item]
        RemotingCommand(code=1, ext_fields={"a": b"x"}, serialize_type=SerializeType.ROCKETMQ),  # type: ignore[dict-item]
        RemotingCommand(code=1, remark="\ud800", serialize_type=SerializeType.ROCKETMQ),
        RemotingCommand(code=1, remark="\ud800"),
        RemotingCommand(code=1, serialize_type=5),  # type: ignore[arg-type]
        RemotingCommand(code=1, remark="x" * 0x1000000),
    ],
)
def test_unencodable_command_raises_command_error(cmd: RemotingCommand) -> None:
    with pytest.raises(CommandError):
        encode(cmd)
