"""authenticationEnabled on the gRPC door: every call of MessagingService is signed and checked
against Ferry's users and ACLs before its handler runs, so a refused call changes nothing.

RocketMQ 5's clients sign each call with two metadata entries: `x-mq-date-time`, and
`authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
Signature=<hex HMAC-SHA1(secret key, x-mq-date-time)>`. Who may sign is Ferry's Guard's
business (the users pulled from the masters, ferry.proxy.users, and the cluster's inner
identity); what a call needs is ferry.proxy.access's; whether the user has it is the Guard's
and the users' ACLs. A bad or missing signature answers UNAUTHORIZED, a missing permission
FORBIDDEN, each in the call's own response (a Status), and the proxy keeps serving.

The date-time: the Python client 5.1.2 writes its LOCAL time with a 'Z' (UTC) suffix, so the
stamp is off by the client's time zone. We accept a stamp from STAMP_BEHIND before UTC to
STAMP_AHEAD after it: every zone's offset (UTC-12 to UTC+14) plus 15 minutes of clock skew.
That refuses stale or made-up stamps (a day old, a year ahead, not a time) but does not stop
a replay within the window; the signature covers only the stamp, so a captured header could
sign other calls anyway (RocketMQ's own proxy checks no time at all). TLS is what keeps
headers from being captured.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from hashlib import sha1
from typing import Any

from ferry.protocol.errors import BadSignatureError, FerryError, NoCredentialsError
from ferry.proxy.protocol import Code
from ferry.runtime.security.guard import Guard
from ferry.runtime.security.permissions import Needs

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
SCHEME = "MQv2-HMAC-SHA1"
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
STAMP_BEHIND = timedelta(hours=12, minutes=15)
STAMP_AHEAD = timedelta(hours=14, minutes=15)
MAX_HEADER = 4096  # longer authorization values are refused unread


class Refused(Exception):
    """A call refused before its handler, with the Code it is answered with."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Signed:
    access_key: str
    signature: str  # hex, as the client wrote it
    stamp: str


def unauthorized(message: str) -> Refused:
    return Refused(Code.UNAUTHORIZED, message)


def parse(metadata: dict[str, str]) -> Signed:
    """The signature a call carries; Refused(UNAUTHORIZED) naming what is wrong with it."""
    header = metadata.get(AUTHORIZATION, "")
    if not header:
        raise unauthorized(f"authentication is on: the call has no {AUTHORIZATION} metadata")
    if len(header) > MAX_HEADER:
        raise unauthorized(f"the {AUTHORIZATION} metadata is longer than {MAX_HEADER} bytes")
    stamp = metadata.get(DATE_TIME, "")
    if not stamp:
        raise unauthorized(f"the call is signed but has no {DATE_TIME} metadata")
    scheme, _, rest = header.partition(" ")
    if scheme != SCHEME:
        raise unauthorized(f"{AUTHORIZATION} is not {SCHEME} (got {scheme[:40]!r})")
    items: dict[str, str] = {}
    for part in rest.split(","):
        key, eq, value = part.strip().partition("=")
        if not eq:
            raise unauthorized(f"{AUTHORIZATION} has {part.strip()[:40]!r}, not key=value")
        items[key] = value.strip()
    access_key = items.get("Credential", "").split("/")[0]
    if not access_key:
        raise unauthorized(f"{AUTHORIZATION} names no Credential (access key)")
    signature = items.get("Signature", "")
    if not signature:
        raise unauthorized(f"{AUTHORIZATION} has no Signature")
    return Signed(access_key, signature, stamp)


def stamp_ok(stamp: str, now: datetime) -> bool:
    """Whether a client's date-time is a time within the zone-wide window around `now`."""
    try:
        when = datetime.strptime(stamp, STAMP_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return False
    return now - STAMP_BEHIND <= when <= now + STAMP_AHEAD


def expected_signature(secret_key: str, stamp: str) -> str:
    return hmac.new(secret_key.encode(), stamp.encode(), sha1).hexdigest()


def source_ip(context: Any) -> str:
    """The client's host from grpc's peer ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000")."""
    where = str(context.peer() or "").partition(":")[2]
    return (where.rsplit(":", 1)[0] if ":" in where else where).strip("[]")


class CallChecker:
    """Authentication, then authorization, of one call, with Ferry's Guard."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard

    def authenticate(self, method: str, context: Any) -> tuple[str, Any]:
        """(access key, user or None for the cluster's own identity), or Refused."""
        metadata = _metadata(context)
        try:
            signed = parse(metadata)
        except Refused as refused:
            self._count(refused, method, "-", context)
            raise
        found = self.guard.secret_of(signed.access_key)
        if isinstance(found, FerryError):
            raise self._refuse(Code.UNAUTHORIZED, found.message, method, signed, context)
        user, secret = found
        good = expected_signature(secret, signed.stamp)
        if not hmac.compare_digest(good, signed.signature.lower()):
            text = f"the signature does not match access key {signed.access_key!r} (wrong secret?)"
            raise self._refuse(Code.UNAUTHORIZED, text, method, signed, context)
        if not stamp_ok(signed.stamp, datetime.now(UTC)):
            text = f"{DATE_TIME} {signed.stamp[:40]!r} is not a time near now (check the clock)"
            raise self._refuse(Code.UNAUTHORIZED, text, method, signed, context)
        return signed.access_key, user

    def authorize(self, who: tuple[str, Any], method: str, need: Needs, context: Any) -> None:
        access_key, user = who
        if user is None:
            return  # the cluster's own identity may do everything, as on every Ferry port
        err = self.guard.permit_needs(access_key, user, method, need, source_ip(context))
        if err is not None:
            self.guard.count_refusal(err, method, access_key, source_ip(context))
            raise Refused(Code.FORBIDDEN, err.message)

    def _refuse(self, code: Code, text: str, method: str, signed: Signed, context: Any) -> Refused:
        refused = Refused(code, text)
        self._count(refused, method, signed.access_key, context)
        return refused

    def _count(self, refused: Refused, method: str, who: str, context: Any) -> None:
        # counted as the Guard counts a Ferry request's: unsigned, or signed badly
        kind = NoCredentialsError if who == "-" else BadSignatureError
        err = kind(refused.message)
        self.guard.count_refusal(err, method, who, source_ip(context))


def _metadata(context: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            out[str(key).lower()] = value
    return out
