"""Request signatures: who sent a request, proved without the secret crossing the wire.

A signed request's envelope names its sender (`auth`: access key and the time it was signed);
one extra frame at the end carries HMAC-SHA256(secret key, header bytes + every payload frame).
The header is signed as the exact bytes sent, so nothing is re-encoded to check it, and the
payload (message bodies) is covered too: a request cannot be altered in flight and keep its
signature. The secret key never leaves the client (ACL 1.0's RPCHook signs the same way,
with HMAC-SHA1 over its fields).

A signature is accepted for `MAX_SKEW_S` around the receiver's clock. Within that window a
captured request could be sent again by someone who can read the wire: that is what CURVE
encryption closes (docs/architecture.md, "Security").
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

MAX_SKEW_S = 900.0  # clocks of different hosts drift; NTP keeps them far closer than this
DIGEST = hashlib.sha256
SIGNATURE_SIZE = DIGEST().digest_size


class Signed(msgspec.Struct, frozen=True, array_like=True):
    """The sender of a signed request, in its envelope."""

    access_key: str
    signed_ms: int
    # the signature covers the header only: the cluster's own services between themselves
    # (the payload was checked where it entered the cluster; CURVE guards it in transit)
    header_only: bool = False


@dataclass(frozen=True)
class Credentials:
    """An access key and its secret key: what a client signs its requests with.

    The secret is kept out of repr() so that it never reaches a log line or a traceback."""

    access_key: str
    secret_key: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("Credentials need a non-empty access key and secret key")

    def sign(self, header: bytes, payload: Sequence[Any]) -> bytes:
        return signature(self.secret_key, header, payload)

    def signed(self, header_only: bool = False) -> Signed:
        return Signed(self.access_key, int(time.time() * 1000), header_only)


def signature(secret_key: str, header: bytes, payload: Sequence[Any]) -> bytes:
    mac = hmac.new(secret_key.encode(), header, DIGEST)
    for frame in payload:
        mac.update(frame)
    return mac.digest()


def signature_ok(secret_key: str, header: bytes, payload: Sequence[Any], sig: bytes) -> bool:
    return hmac.compare_digest(signature(secret_key, header, payload), bytes(sig))


def fresh(signed: Signed, now_s: float | None = None) -> bool:
    now = time.time() if now_s is None else now_s
    return abs(now - signed.signed_ms / 1000.0) <= MAX_SKEW_S


# ---- sealing: a secret that must travel (a new user's password, the users' snapshot) ----
#
# Sealed with a key both ends already hold (the signer's secret key, or the cluster's inner
# one): a keystream of HMAC-SHA256(key, nonce + counter) blocks XORed with the plaintext (a
# PRF in counter mode), then an HMAC tag over nonce and ciphertext. Standard-library parts
# only; CURVE (tlsEnable) encrypts the whole connection on top.

NONCE_SIZE = 16


def _keystream(key: bytes, nonce: bytes, size: int) -> bytes:
    blocks = []
    for counter in range((size + SIGNATURE_SIZE - 1) // SIGNATURE_SIZE):
        blocks.append(hmac.new(key, nonce + counter.to_bytes(8, "big"), DIGEST).digest())
    return b"".join(blocks)[:size]


def _xor(data: bytes, stream: bytes) -> bytes:
    n = len(data)
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(n, "big")


def _keys(secret_key: str) -> tuple[bytes, bytes]:
    base = secret_key.encode()
    return (
        hmac.new(base, b"ferry-seal-encrypt", DIGEST).digest(),
        hmac.new(base, b"ferry-seal-authenticate", DIGEST).digest(),
    )


def seal(secret_key: str, plaintext: bytes) -> bytes:
    enc, mac = _keys(secret_key)
    nonce = os.urandom(NONCE_SIZE)
    stream = _keystream(enc, nonce, len(plaintext))
    body = nonce + _xor(plaintext, stream)
    return body + hmac.new(mac, body, DIGEST).digest()


def unseal(secret_key: str, sealed: bytes) -> bytes | None:
    """The plaintext, or None when the seal was made with another key or was altered."""
    if len(sealed) < NONCE_SIZE + SIGNATURE_SIZE:
        return None
    enc, mac = _keys(secret_key)
    body, tag = sealed[:-SIGNATURE_SIZE], sealed[-SIGNATURE_SIZE:]
    if not hmac.compare_digest(hmac.new(mac, body, DIGEST).digest(), tag):
        return None
    nonce, cipher = body[:NONCE_SIZE], body[NONCE_SIZE:]
    stream = _keystream(enc, nonce, len(cipher))
    return _xor(cipher, stream)
