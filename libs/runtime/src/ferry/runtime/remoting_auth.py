"""RocketMQ's ACL signature on the remoting protocol, checked against Ferry's own users.

A RocketMQ client with credentials (set_session_credentials, AclClientRPCHook) puts its access
key in the AccessKey ext field and, in Signature, base64(HMAC-SHA1(secret key, content)), where
content is the values of every other ext field in the order of their names, then the body.
The door checks that signature with the user's secret from the same users and ACLs as Ferry's
own wire (ferry.runtime.security.guard), then asks the guard whether the user may send the
request. With authentication off the fields are ignored (the C++ client always sends them).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from ferry.protocol.errors import BadSignatureError, FerryError, NoCredentialsError
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.runtime.security.guard import Guard

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"


def signed_content(cmd: RemotingCommand) -> bytes:
    fields = cmd.ext_fields
    text = "".join(fields[k] for k in sorted(fields) if k != SIGNATURE)
    return text.encode() + cmd.body


def signature(secret_key: str, content: bytes) -> str:
    digest = hmac.new(secret_key.encode(), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def authenticate(guard: Guard, cmd: RemotingCommand) -> tuple[str, Any] | FerryError:
    """(access key, user: None for the cluster's own services) of a correctly signed
    request, or why it is refused."""
    access_key = cmd.ext_fields.get(ACCESS_KEY, "")
    given = cmd.ext_fields.get(SIGNATURE, "")
    if not access_key or not given:
        return NoCredentialsError(
            f"{guard.service} has authentication on: request code {cmd.code} needs credentials "
            "(set the client's access key and secret key)"
        )
    found = guard.secret_of(access_key)
    if isinstance(found, FerryError):
        return found
    user, secret = found
    if not hmac.compare_digest(signature(secret, signed_content(cmd)), given):
        return BadSignatureError(
            f"the signature of request code {cmd.code} does not match access key "
            f"{access_key!r} (wrong secret key?)"
        )
    return access_key, user
