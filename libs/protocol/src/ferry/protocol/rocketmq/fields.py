"""Reading a request's header fields (extFields, strings on the wire) and writing a response's,
shared by the doors in front of the name server and the broker."""

from __future__ import annotations

from typing import Any

import msgspec

from ferry.protocol.rocketmq.command import RemotingCommand

SUCCESS = 0
_JSON = msgspec.json.Encoder()


def ext(cmd: RemotingCommand, key: str) -> str:
    """A header field the request must carry (ValueError names it when it is missing)."""
    value = cmd.ext_fields.get(key)
    if value is None:
        raise ValueError(f"the header lacks {key}")
    return value


# header fields are Java longs or ints: a number past a long is no header a client sends, and
# past an int it is refused where the field is one (ext_int32)
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def ext_int(
    cmd: RemotingCommand,
    key: str,
    default: int | None = None,
    *,
    low: int = LONG_MIN,
    high: int = LONG_MAX,
) -> int:
    """A whole-number header field within [low, high] (a Java long unless told); `default`
    when absent (required when default is None). ValueError names the field otherwise."""
    value = cmd.ext_fields.get(key)
    if value is None or value == "":
        if default is None:
            raise ValueError(f"the header lacks {key}")
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"header field {key}={value!r} is not a whole number") from None
    if not low <= number <= high:
        raise ValueError(f"header field {key}={value} is out of range ({low} to {high})")
    return number


def ext_int32(cmd: RemotingCommand, key: str, default: int | None = None) -> int:
    """A header field that is a Java int."""
    return ext_int(cmd, key, default, low=INT_MIN, high=INT_MAX)


def ext_bool(cmd: RemotingCommand, key: str, default: bool = False) -> bool:
    value = cmd.ext_fields.get(key)
    if value is None or value == "":
        return default
    return value.lower() == "true"


def ok(cmd: RemotingCommand, body: Any = None, **fields: str) -> RemotingCommand:
    """A SUCCESS response: body (if any) as JSON, header fields as given (strings)."""
    payload = b"" if body is None else _JSON.encode(body)
    return cmd.response(SUCCESS, ext_fields=fields or None, body=payload)


def json_body(body: Any) -> bytes:
    return _JSON.encode(body)
