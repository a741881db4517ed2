"""Hypothesis strategies for what a hostile or broken peer sends a RocketMQ door (the name
server's and the broker's remoting ports): random bytes, lengths that lie, valid frames
mutated, JSON headers that are not JSON or have the wrong types, ROCKETMQ binary headers with
bad lengths, and well-formed commands of random codes with random ext fields and bodies.

Each example is the bytes sent on one connection. outcome() reads them as the door does (its
4-byte length, then ferry.protocol.rocketmq.command.decode) and says what must come back: a
response to each whole request, or the connection closed. Inputs that would decode into a
request that writes (WRITES) are left out, whichever strategy made them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import msgspec
from hypothesis import strategies as st

from ferry.protocol.rocketmq.codes import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    RequestCode,
    SerializeType,
)
from ferry.protocol.rocketmq.command import CommandError, RemotingCommand, decode, encode
from ferry.runtime.tcp_door import MAX_FRAME_BYTES

MIN_FRAME_BYTES = 4  # the door's: the header length word

# Codes below 10000 that, well-formed, change stored data, the cluster's configuration or
# another client's state: sends, send-backs and transactions, offsets, and every admin code
# that creates, updates or deletes (topics, groups, kv, configs, permissions, users and ACLs,
# controller and HA state, files). HEART_BEAT (34), UNREGISTER_CLIENT (35) and the queue
# locks (41, 42) change only memory and are fuzzed. PULL_MESSAGE (11) is fuzzed without its
# commit-offset and suspend flags (see _pull_flags).
WRITES = frozenset(
    {
        10, 310, 320, 324, 325,  # sends, replies
        15, 36, 37,  # consumer offset, send back, end transaction
        17, 18, 25, 27, 513,  # topics, broker config, delete files, static topic
        100, 102, 103, 104,  # kv store, broker registration
        200, 205, 207, 209, 210, 211, 212, 213, 215, 216, 217, 220, 222, 225,
        301, 302, 306, 309, 314, 316, 318, 323, 326, 327, 329, 353, 355, 370, 401,
        902, 903, 904, 905, 906, 908,  # broker membership and HA
        1001, 1002, 1003, 1008, 1009, 1011, 1013,  # controller
        2001, 2002, 2004,  # cold data flow, commitlog read mode
        *range(3001, 3011),  # users and ACLs (the reads too: kept simple)
    }
)  # fmt: skip
KNOWN_CODES = frozenset(int(c) for c in RequestCode)
READ_CODES = tuple(sorted(c for c in KNOWN_CODES if c < 10000 and c not in WRITES))
PULL = int(RequestCode.PULL_MESSAGE)
_PULL_UNSAFE = 0x1 | 0x2  # commit offset (a write), suspend (a held request)

FIELD_NAMES = (
    "topic", "queueId", "consumerGroup", "producerGroup", "group", "groupName", "clientID",
    "clusterName", "brokerName", "key", "namespace", "offset", "queueOffset", "commitOffset",
    "maxMsgNums", "maxMsgBytes", "maxNum", "sysFlag", "suspendTimeoutMillis", "subscription",
    "expressionType", "timestamp", "beginTimestamp", "endTimestamp", "msgId", "offsetMsgId",
    "commitLogOffset", "topicList", "perm", "readQueueNums", "writeQueueNums", "order",
    "delayLevel", "originMsgId", "originTopic", "AccessKey", "Signature",
)  # fmt: skip
_VALUES = st.one_of(
    st.sampled_from(
        ["", "0", "1", "-1", "4", "Kept", "TBW102", "DefaultCluster", "broker-a", "true", "*",
         "2147483648", "-9223372036854775809", "1" * 30, "9" * 5000, "1e9", "0x10", " 7", "3_0",
         "x" * 2000, "%RETRY%fuzz", "\x00", "\u00e9\u6f22"]
    ),
    st.integers(-(2**63), 2**64).map(str),
    st.text(max_size=16),
)  # fmt: skip
_EXT = st.dictionaries(
    st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=8)), _VALUES, max_size=6
)
# fields as a client would fill them, so that reading codes are served and not only refused
_GOOD = {
    "topic": st.sampled_from(["Kept", "TBW102", "Fuzz", "%RETRY%cg-fuzz"]),
    "queueId": st.sampled_from(["0", "1", "7", "8"]),
    "consumerGroup": st.sampled_from(["cg-fuzz", "pg-kept"]),
    "queueOffset": st.sampled_from(["0", "5", "1000"]),
    "key": st.sampled_from(["kept-1", "none"]),
}
_GOOD_OPTIONAL = {
    "group": _GOOD["consumerGroup"],
    "groupName": _GOOD["consumerGroup"],
    "producerGroup": st.just("pg-kept"),
    "clusterName": st.just("DefaultCluster"),
    "brokerName": st.just("broker-a"),
    "maxMsgNums": st.sampled_from(["1", "32"]),
    "maxNum": st.sampled_from(["1", "32"]),
    "sysFlag": st.sampled_from(["0", "4"]),
    "subscription": st.sampled_from(["*", "a || b", "("]),
    "expressionType": st.sampled_from(["TAG", "SQL92", "NONE"]),
    "timestamp": st.sampled_from(["0", "1700000000000"]),
    "beginTimestamp": st.just("0"),
    "endTimestamp": st.just("9999999999999"),
    "clientID": st.just("fuzz@1"),
}
_PLAUSIBLE = st.builds(
    lambda good, more: {**good, **more},
    st.fixed_dictionaries(_GOOD, optional=_GOOD_OPTIONAL),
    st.dictionaries(st.sampled_from(FIELD_NAMES), _VALUES, max_size=2),
)
_wild = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_queue = st.fixed_dictionaries(
    {}, optional={"topic": _VALUES, "queueId": st.one_of(st.integers(), _wild), "brokerName": _wild}
)
_JSON_BODIES = st.one_of(
    _wild,
    st.fixed_dictionaries(  # a HeartbeatData
        {"clientID": st.one_of(_VALUES, _wild)},
        optional={
            "producerDataSet": st.lists(st.fixed_dictionaries({"groupName": _VALUES}), max_size=2),
            "consumerDataSet": st.lists(
                st.fixed_dictionaries(
                    {"groupName": _VALUES},
                    optional={
                        "consumeType": st.one_of(st.integers(-1, 5), _VALUES),
                        "messageModel": st.one_of(st.integers(-1, 3), _VALUES),
                        "consumeFromWhere": st.one_of(st.integers(-1, 8), _VALUES),
                        "subscriptionDataSet": st.lists(
                            st.fixed_dictionaries(
                                {"topic": _VALUES}, optional={"subString": _wild}
                            ),
                            max_size=2,
                        ),
                    },
                ),
                max_size=2,
            ),
        },
    ),
    st.fixed_dictionaries(  # a LockBatchRequestBody
        {"consumerGroup": _VALUES, "clientId": _VALUES},
        optional={"mqSet": st.lists(_queue, max_size=3)},
    ),
).map(msgspec.json.encode)
_BODIES = st.one_of(st.just(b""), st.binary(max_size=96), _JSON_BODIES)
_I32 = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([0, 1, -1, 2**31 - 1]))
_INT = struct.Struct(">i")
_UINT = struct.Struct(">I")


# ---- what the door must do with some bytes ----


@dataclass
class Outcome:
    """What a door does with one input: answers the requests whose opaques are in `answers`
    (in some order), and closes the connection when `closes`; `writes` marks an input left out."""

    answers: list[int] = field(default_factory=list)
    closes: bool = False
    writes: bool = False


def _pull_flags(ext: dict[str, str]) -> int | None:
    try:
        return int(ext.get("sysFlag") or 0)
    except ValueError:
        return None


def _writes(cmd: RemotingCommand) -> bool:
    if cmd.code == PULL:
        flags = _pull_flags(cmd.ext_fields)
        return flags is not None and bool(flags & _PULL_UNSAFE)
    return cmd.code in WRITES


def outcome(data: bytes) -> Outcome:
    """Splits data as the door does and decodes each whole frame."""
    out = Outcome()
    pos = 0
    while len(data) - pos >= 4:
        (size,) = _UINT.unpack_from(data, pos)
        if size > MAX_FRAME_BYTES or size < MIN_FRAME_BYTES:
            out.closes = True
            break
        if pos + 4 + size > len(data):
            break  # the rest never comes: the door waits
        try:
            cmd = decode(data[pos + 4 : pos + 4 + size])
        except CommandError:
            out.closes = True
            break
        pos += 4 + size
        out.writes |= _writes(cmd)
        if not cmd.flag & (RESPONSE_FLAG | ONEWAY_FLAG):
            out.answers.append(cmd.opaque)
    return out


# ---- the strategies ----


def _frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    return (
        _INT.pack(4 + len(header) + len(body))
        + _UINT.pack(kind << 24 | len(header))
        + header
        + body
    )


def _safe_ext(code: int, ext: dict[str, str]) -> dict[str, str]:
    if code == PULL:
        flags = _pull_flags(ext)
        ext = {**ext, "sysFlag": str((flags or 0) & ~_PULL_UNSAFE)}
    return ext


@st.composite
def commands(draw: st.DrawFn, served: tuple[int, ...] = READ_CODES) -> RemotingCommand:
    """A valid request: mostly of a reading code the door serves, else of any reading code
    or an unknown number."""
    code = draw(
        st.one_of(
            *[st.sampled_from(served or READ_CODES)] * 3,
            st.sampled_from(READ_CODES),
            st.integers(-(2**15), 2**31 - 1).filter(lambda c: c not in KNOWN_CODES),
        )
    )
    flag = draw(st.one_of(*[st.just(0)] * 4, st.sampled_from([ONEWAY_FLAG, RESPONSE_FLAG]), _I32))
    return RemotingCommand(
        code=code,
        language=draw(st.sampled_from(list(LanguageCode))),
        version=draw(st.sampled_from([0, 317, 453]) | st.integers(-(2**15), 2**15 - 1)),
        opaque=draw(_I32),
        flag=flag,
        remark=draw(st.sampled_from(["", "x"]) | st.text(max_size=12)),
        ext_fields=_safe_ext(code, draw(st.one_of(_PLAUSIBLE, _EXT))),
        body=draw(_BODIES),
        serialize_type=draw(st.sampled_from(list(SerializeType))),
    )


def _encoded(cmd: RemotingCommand) -> bytes:
    try:
        return encode(cmd)
    except CommandError:  # a code or version past int16 in a binary header: send it as JSON
        cmd.serialize_type = SerializeType.JSON
        return encode(cmd)


def well_formed(served: tuple[int, ...] = READ_CODES) -> st.SearchStrategy[bytes]:
    return commands(served).map(_encoded)


@st.composite
def lying_lengths(draw: st.DrawFn) -> bytes:
    """A valid frame whose total or header length lies: longer than sent, absurd, below 4."""
    frame = bytearray(draw(well_formed()))
    sent = len(frame) - 4
    where = draw(st.sampled_from(["total", "total", "header"]))
    if where == "total":
        size = draw(
            st.one_of(
                st.integers(sent + 1, sent + 4096),
                st.integers(MAX_FRAME_BYTES + 1, 2**32 - 1),
                st.sampled_from([2**31 - 1, 2**31, 2**32 - 1, MAX_FRAME_BYTES]),
                st.integers(0, MIN_FRAME_BYTES - 1),
            )
        )
        frame[:4] = _UINT.pack(size)
    else:
        word = draw(st.integers(0, 2**32 - 1) | st.sampled_from([0, 1 << 24, 0xFFFFFF]))
        frame[4:8] = _UINT.pack(word)
    return bytes(frame)


@st.composite
def mutated(draw: st.DrawFn, served: tuple[int, ...] = READ_CODES) -> bytes:
    """A valid frame with bytes flipped or set, cut short, or bytes put in."""
    raw = bytearray(draw(well_formed(served)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        at = draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and raw:
            raw[at] = draw(st.integers(0, 255))
        elif op == "truncate":
            del raw[at:]
        elif op == "insert":
            raw[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and raw:
            del raw[at : at + draw(st.integers(1, 8))]
    return bytes(raw)


_NOT_JSON = st.one_of(
    st.sampled_from(
        [b"", b"{", b"}", b"null", b"[]", b"[1,2]", b'"code"', b"123", b"{code:30}", b"{'code':30}",
         b'{"code":30', b'{"code":30}}', b'{"code":30,}', b"\xff\xfe{}", b'{"code":"\xff"}',
         b'{"code":1,"remark":"\xed\xa0\x80"}', b"NaN", b'{"code":Infinity}']
    ),
    st.binary(max_size=64),
    st.text(max_size=40).map(str.encode),
)  # fmt: skip
_WRONG = {
    "code": st.one_of(
        st.sampled_from(["30", None, 1.5, True, [], {}, 2**31, -(2**31) - 1, 10**30, 1e308]),
        st.sampled_from(READ_CODES),
    ),
    "language": st.one_of(st.sampled_from(["JAVA", "KLINGON", 1, -1, 2**40, None, [], 1.5]), _wild),
    "version": st.one_of(st.sampled_from([0, "0", 2**31, None, -1.5]), _wild),
    "opaque": st.one_of(_I32, st.sampled_from(["1", 2**31, -(2**31) - 1, None, 2.5, [1]])),
    "flag": st.one_of(st.sampled_from([0, 2, "0", 2**31, None, 1.0]), _wild),
    "remark": st.one_of(st.none(), st.text(max_size=12), _wild),
    "extFields": st.one_of(
        _EXT,
        st.dictionaries(st.sampled_from(FIELD_NAMES), _wild, max_size=4),
        st.sampled_from([None, [], "x", 1, [["topic", "Kept"]]]),
    ),
    "serializeTypeCurrentRPC": st.sampled_from(["JSON", "ROCKETMQ", 1]),
}


@st.composite
def bad_json(draw: st.DrawFn) -> bytes:
    """JSON headers that are not JSON, or are JSON with wrong types."""
    if draw(st.booleans()):
        header = draw(_NOT_JSON)
    else:
        header = msgspec.json.encode(draw(st.fixed_dictionaries({}, optional=_WRONG)))
    return _frame(header, draw(_BODIES))


@st.composite
def bad_binary(draw: st.DrawFn) -> bytes:
    """ROCKETMQ binary headers whose lengths lie, and headers of unknown serialize types."""
    fixed = struct.pack(
        ">hbhii", draw(st.sampled_from(READ_CODES)), 1, 0, draw(_I32), draw(st.sampled_from([0, 2]))
    )
    lie = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([-1, 0, 1, 2**31 - 1]))
    remark = draw(st.binary(max_size=12))
    remark_len = draw(st.one_of(st.just(len(remark)), lie))
    key, value = draw(st.sampled_from(FIELD_NAMES)).encode(), draw(st.binary(max_size=12))
    key_len = draw(st.one_of(st.just(len(key)), st.integers(-(2**15), 2**15 - 1)))
    value_len = draw(st.one_of(st.just(len(value)), lie))
    ext = struct.pack(">h", key_len) + key + _INT.pack(value_len) + value
    ext_len = draw(st.one_of(st.just(len(ext)), lie))
    header = fixed + _INT.pack(remark_len) + remark + _INT.pack(ext_len) + ext
    header = header[: draw(st.integers(0, len(header)))] if draw(st.booleans()) else header
    kind = draw(st.sampled_from([1, 1, 1, 2, 0x7F, 0xFF]))
    return _frame(header, draw(_BODIES), kind)


def random_bytes() -> st.SearchStrategy[bytes]:
    """Random bytes, bare or behind a length that matches them."""
    return st.one_of(
        st.binary(max_size=200),
        st.binary(min_size=4, max_size=200).map(lambda b: _INT.pack(len(b)) + b),
    )


def door_inputs(served: tuple[int, ...] = READ_CODES) -> st.SearchStrategy[bytes]:
    """One connection's bytes: one to three of the above, back to back, none that writes;
    the well-formed ones aimed mostly at the reading codes the door serves."""
    one = st.one_of(
        random_bytes(),
        lying_lengths(),
        mutated(served),
        bad_json(),
        bad_binary(),
        *[well_formed(served)] * 3,
    )
    many = st.lists(one, min_size=1, max_size=3).map(b"".join)
    return st.one_of(one, one, many).filter(lambda data: not outcome(data).writes)
