"""Ferry's per-record loops in C, when they are built and allowed.

ENABLED is False when the extension did not build (no compiler) or when FERRY_NATIVE=0 asks
for the Python code (to compare, or to rule the C code out); callers check it on every call.
Every function has a Python reference in the package that calls it, and answers None (or
calls back) where that reference must decide: a malformed record, a non-ASCII tag or key.
The C code keeps no Python class shape of its own: the SDK hands over its classes' attribute
names and a PlainMessage's field positions with bind_sdk (ferry.client.message, at import).
"""

from __future__ import annotations

import os

try:
    from ferry.native._speedups import (
        batch_records,
        bind_sdk,
        crc32,
        decode_records,
        encode_plain_batch,
        indexed_records,
        joined_offset_ids,
        key_hash,
        plain_message,
        plain_messages,
        put_entries,
        queue_runs,
        scan_batch,
        send_results,
        stamp,
        unfilled,
    )
except ImportError:  # pragma: no cover - only where the extension could not be built
    BUILT = False
else:
    BUILT = True

ENABLED = BUILT and os.environ.get("FERRY_NATIVE", "1") != "0"

__all__ = [
    "BUILT",
    "ENABLED",
    "batch_records",
    "bind_sdk",
    "crc32",
    "decode_records",
    "describe",
    "encode_plain_batch",
    "indexed_records",
    "joined_offset_ids",
    "key_hash",
    "plain_message",
    "plain_messages",
    "put_entries",
    "queue_runs",
    "scan_batch",
    "send_results",
    "stamp",
    "unfilled",
]


def describe() -> str:
    """A word for logs and status pages: which code runs the per-record loops."""
    return "C" if ENABLED else "Python"
