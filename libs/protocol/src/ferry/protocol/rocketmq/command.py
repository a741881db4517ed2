"""RocketMQ's RemotingCommand: the value and its two wire serializations (no I/O).

A frame on the wire is
    int32 total length (of all that follows)
    int32 header length, its high byte the SerializeType, its low 24 bits the length
    header (JSON, or ROCKETMQ's binary layout)
    body (the rest)
encode() makes a whole frame; decode() reads one frame after its total length, as
FrameSplitter hands it over. Every malformed input raises CommandError and nothing else.
"""

from __future__ import annotations

import struct
from typing import Annotated, Any

import msgspec

from ferry.protocol.rocketmq.codes import ONEWAY_FLAG, RESPONSE_FLAG, LanguageCode, SerializeType


class CommandError(ValueError):
    """A frame or header that cannot be a RemotingCommand: the connection should be closed."""


_I32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
_ExtValue = str | int | float | bool | None


class RemotingCommand(msgspec.Struct, kw_only=True):
    """One request or response. ext_fields carry a request's header fields, always as str."""

    code: int
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str = ""
    ext_fields: dict[str, str] = {}
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def response(
        self,
        code: int,
        remark: str = "",
        *,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        language: LanguageCode = LanguageCode.JAVA,
        version: int = 0,
    ) -> RemotingCommand:
        """The response to this request: same opaque, response flag set, and the request's
        serialization (RocketMQ answers in the one the caller used)."""
        return RemotingCommand(
            code=code,
            language=language,
            version=version,
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext_fields={} if ext_fields is None else ext_fields,
            body=body,
            serialize_type=self.serialize_type,
        )


class _JsonHeader(msgspec.Struct):
    """The JSON header as clients send it (unknown keys are ignored). language is a name;
    fastjson also reads a number. serializeTypeCurrentRPC goes out as Java writes it: the Rust
    client (rocketmq-client-rust) drops a header without it."""

    code: _I32
    language: str | int = "JAVA"
    version: _I32 = 0
    opaque: _I32 = 0
    flag: _I32 = 0
    remark: str | None = None
    extFields: dict[str, str] | None = None  # noqa: N815  # the wire's name
    serializeTypeCurrentRPC: str = "JSON"  # noqa: N815


class _LooseJsonHeader(_JsonHeader):
    """The same with ext values that are not strings, which some clients send: tried only
    when the header does not decode as _JsonHeader, so the usual header is decoded once."""

    extFields: dict[str, _ExtValue] | None = None  # type: ignore[assignment]  # noqa: N815


# Stateless between calls (they hold only the type), so one of each serves every caller and
# thread, as a compiled regex would; msgspec.json.decode(type=...) costs twice as much.
_JSON_DECODER = msgspec.json.Decoder(_JsonHeader)
_LOOSE_JSON_DECODER = msgspec.json.Decoder(_LooseJsonHeader)
_JSON_ENCODER = msgspec.json.Encoder()

_LANGUAGE_BY_NAME = {m.name: m for m in LanguageCode}
_LANGUAGE_BY_NUMBER = {m.value: m for m in LanguageCode}
_LANGUAGE_NAMES = {m.value: m.name for m in LanguageCode}
_SERIALIZE_TYPES = {m.value: m for m in SerializeType}
# enum members as module names: a class attribute lookup on an Enum costs on the hot path
_JSON = SerializeType.JSON
_ROCKETMQ = SerializeType.ROCKETMQ
_OTHER = LanguageCode.OTHER

_INT = struct.Struct(">i")
_FRAME_HEAD = struct.Struct(">ii")  # total length, header length with its type byte
_BIN_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_BIN_HEAD = struct.Struct(">hbhiii")  # the same and the remark's length
_BIN_I16 = struct.Struct(">h")
_JSON_INTS = struct.Struct(">iiii")  # code, version, opaque, flag: int32 in JSON headers
_HEADER_LENGTH_MAX = 0xFFFFFF  # the 24 bits beside the type byte


def _ext_str(value: Any) -> str:
    # how a Java client would print the value it meant; clients read JSON numbers as 0
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return repr(value)
    raise CommandError(f"ext field value of type {type(value).__name__} is not a string")


def _str_ext(ext: dict[str, Any]) -> dict[str, str]:
    """ext with every value a str (None values dropped), the same dict when it already is."""
    for value in ext.values():
        if type(value) is not str:
            return {k: _ext_str(v) for k, v in ext.items() if v is not None}
    return ext


# -- encoding --


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame of cmd, its 4-byte total length included."""
    return b"".join(encode_parts(cmd))


def encode_parts(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    """The frame of cmd as (lengths and header, body): written one after the other, a pull's
    records go out without being copied into the frame."""
    kind = cmd.serialize_type
    if kind == _JSON:
        header = _encode_json_header(cmd)
    elif kind == _ROCKETMQ:
        header = _encode_binary_header(cmd)
    else:
        raise CommandError(f"unknown serialize type {cmd.serialize_type!r}")
    size = len(header)
    if size > _HEADER_LENGTH_MAX:
        raise CommandError(f"header of {size} bytes does not fit in 24 bits")
    body = cmd.body
    head = _FRAME_HEAD.pack(4 + size + len(body), (cmd.serialize_type << 24) | size)
    return head + header, body


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    try:
        _JSON_INTS.pack(cmd.code, cmd.version, cmd.opaque, cmd.flag)
    except struct.error as e:
        raise CommandError(f"cannot encode JSON header: {e}") from None
    language = _LANGUAGE_NAMES.get(cmd.language)
    if language is None:
        raise CommandError(f"unknown language code {cmd.language!r}")
    header = _JsonHeader(
        code=cmd.code,
        language=language,
        version=cmd.version,
        opaque=cmd.opaque,
        flag=cmd.flag,
        remark=cmd.remark,
        extFields=_str_ext(cmd.ext_fields),
    )
    try:
        return _JSON_ENCODER.encode(header)
    except (TypeError, ValueError, OverflowError) as e:
        raise CommandError(f"cannot encode JSON header: {e}") from None


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    try:
        return _binary_header(cmd)
    except (struct.error, UnicodeEncodeError) as e:
        # code and version are int16 here: codes above 32767 travel in JSON headers only
        raise CommandError(f"cannot encode ROCKETMQ header: {e}") from None


def _binary_header(cmd: RemotingCommand) -> bytes:
    parts = [_BIN_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag)]
    remark = cmd.remark.encode()
    parts += (_INT.pack(len(remark)), remark)
    fields: list[bytes] = []
    for key, value in _str_ext(cmd.ext_fields).items():
        k = key.encode()
        v = value.encode()
        if len(k) > 0x7FFF:
            raise CommandError(f"ext field name of {len(k)} bytes does not fit in int16")
        fields += (_BIN_I16.pack(len(k)), k, _INT.pack(len(v)), v)
    ext = b"".join(fields)
    parts += (_INT.pack(len(ext)), ext)
    return b"".join(parts)


# -- decoding --


def decode(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """The command in one frame, given without its 4-byte total length."""
    size = len(frame)
    if size < 4:
        raise CommandError(f"frame of {size} bytes has no header length")
    (word,) = _INT.unpack_from(frame, 0)
    kind = (word >> 24) & 0xFF
    header_size = word & 0xFFFFFF
    if header_size > size - 4:
        raise CommandError(
            f"header length {header_size} is beyond the frame ({size - 4} bytes after it)"
        )
    serialize_type = _SERIALIZE_TYPES.get(kind)
    header = memoryview(frame)[4 : 4 + header_size]
    body = bytes(frame[4 + header_size :])
    if serialize_type is _JSON:
        return _decode_json(header, body)
    if serialize_type is _ROCKETMQ:
        return _decode_binary(bytes(header), body)
    raise CommandError(f"unknown serialize type {kind}")


def _decode_json(header: memoryview, body: bytes) -> RemotingCommand:
    # bad UTF-8 inside a string escapes msgspec as UnicodeDecodeError, not DecodeError
    h: _JsonHeader
    try:
        h = _JSON_DECODER.decode(header)
        ext = h.extFields
    except msgspec.ValidationError:
        try:
            h = _LOOSE_JSON_DECODER.decode(header)
        except (msgspec.DecodeError, UnicodeDecodeError) as e:  # ValidationError included
            raise CommandError(f"bad JSON header: {e}") from None
        ext = None if h.extFields is None else _str_ext(h.extFields)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise CommandError(f"bad JSON header: {e}") from None
    language = h.language
    if isinstance(language, str):
        lang = _LANGUAGE_BY_NAME.get(language, _OTHER)
    else:
        lang = _LANGUAGE_BY_NUMBER.get(language, _OTHER)
    return RemotingCommand(
        code=h.code,
        language=lang,
        version=h.version,
        opaque=h.opaque,
        flag=h.flag,
        remark=h.remark or "",
        ext_fields={} if ext is None else ext,
        body=body,
        serialize_type=_JSON,
    )


class _Malformed(Exception):
    """Raised inside _decode_binary's fast path; _explain_binary then says what is wrong."""


def _decode_binary(header: bytes, body: bytes) -> RemotingCommand:
    size = len(header)
    try:
        code, language, version, opaque, flag, n = _BIN_HEAD.unpack_from(header, 0)
        at = _BIN_HEAD.size
        remark = ""
        if n:
            if n < 0 or at + n > size:
                raise _Malformed
            remark = header[at : at + n].decode()
            at += n
        (n,) = _INT.unpack_from(header, at)
        at += 4
        end = at + n
        if n < 0 or end > size:
            raise _Malformed
        ext: dict[str, str] = {}
        while at < end:
            (n,) = _BIN_I16.unpack_from(header, at)
            key_end = at + 2 + n
            if n < 0 or key_end + 4 > end:
                raise _Malformed
            key = header[at + 2 : key_end].decode()
            (n,) = _INT.unpack_from(header, key_end)
            at = key_end + 4 + n
            if n < 0 or at > end:
                raise _Malformed
            ext[key] = header[key_end + 4 : at].decode()
    except (_Malformed, struct.error, UnicodeDecodeError):
        _explain_binary(memoryview(header))
        raise CommandError("malformed ROCKETMQ header") from None
    # bytes after the ext fields are ignored, as RocketMQ's own decoders do
    return RemotingCommand(
        code=code,
        language=_LANGUAGE_BY_NUMBER.get(language, _OTHER),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        body=body,
        serialize_type=_ROCKETMQ,
    )


def _explain_binary(header: memoryview) -> None:
    """Raises CommandError saying what is wrong with a header _decode_binary refused: the
    same walk, slower, checking each length on the way."""
    size = len(header)
    if size < _BIN_FIXED.size + 8:
        raise CommandError(f"ROCKETMQ header of {size} bytes is shorter than its fixed part")
    at = _BIN_FIXED.size
    _, at = _read_str(header, at, _INT, "remark")
    (ext_size,) = _read_length(header, at, _INT, "ext fields")
    at += 4
    end = at + ext_size
    if ext_size < 0 or end > size:
        raise CommandError(f"ext fields length {ext_size} is beyond the header")
    fields = header[:end]  # a field running past the ext length is truncated
    while at < end:
        key, at = _read_str(fields, at, _BIN_I16, "ext field name")
        _, at = _read_str(fields, at, _INT, f"ext field {key!r}")


def _read_length(buf: memoryview, at: int, prefix: struct.Struct, what: str) -> tuple[int]:
    if at + prefix.size > len(buf):
        raise CommandError(f"ROCKETMQ header truncated in the length of the {what}")
    return prefix.unpack_from(buf, at)


def _read_str(buf: memoryview, at: int, prefix: struct.Struct, what: str) -> tuple[str, int]:
    """The length-prefixed UTF-8 string at `at`, and the offset after it."""
    (n,) = _read_length(buf, at, prefix, what)
    at += prefix.size
    if n < 0 or at + n > len(buf):
        raise CommandError(f"{what} length {n} is beyond the ROCKETMQ header")
    try:
        return str(buf[at : at + n], "utf-8"), at + n
    except UnicodeDecodeError as e:
        raise CommandError(f"{what} is not UTF-8: {e}") from None
