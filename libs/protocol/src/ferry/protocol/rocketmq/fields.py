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


def ext_int(cmd: RemotingCommand, key: str, default: int | None = None) -> int:
    """A whole-number header field; `default` when absent (required when default is None)."""
    value = cmd.ext_fields.get(key)
    if value is None or value == "":
        if default is None:
            raise ValueError(f"the header lacks {key}")
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"header field {key}={value!r} is not a whole number") from None


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
