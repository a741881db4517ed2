"""Hosts as a record holds them (IPv4 and port in 8 bytes), and RocketMQ's offset message ids
made of a store host and a CommitLog offset (reached as ferry.protocol.record.X)."""

from __future__ import annotations

import socket

from ferry.protocol.record_layout import HOST_SIZE
from ferry.protocol.record_types import RecordError


def pack_host(host: str) -> bytes:
    """'ip:port' -> 4 bytes of IPv4 + 4 bytes of port (RocketMQ's host layout)."""
    ip, _, port = host.rpartition(":")
    try:
        return socket.inet_aton(ip or "0.0.0.0") + int(port or 0).to_bytes(4, "big")
    except (OSError, ValueError):
        return bytes(HOST_SIZE)


# Decoded hosts (and topics, in record.py): a consumer sees the same few over and over, and
# formatting them per record was a fifth of its decode time. Bounded, since records may come
# from anywhere.
_HOSTS: dict[bytes, str] = {}
_CACHE_MAX = 4096


def unpack_host(raw: bytes) -> str:
    host = _HOSTS.get(raw)
    if host is None:
        host = f"{socket.inet_ntoa(raw[:4])}:{int.from_bytes(raw[4:8], 'big')}"
        if len(_HOSTS) >= _CACHE_MAX:
            _HOSTS.clear()
        _HOSTS[bytes(raw)] = host
    return host


def offset_msg_id(store_host: str, phys_offset: int) -> str:
    """RocketMQ's offset message id: store IPv4 + port + CommitLog offset, 32 hex digits."""
    return (pack_host(store_host) + phys_offset.to_bytes(8, "big")).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise RecordError(f"not an offset message id: {msg_id!r}") from None
    if len(raw) != 16:
        raise RecordError(f"not an offset message id: {msg_id!r}")
    return unpack_host(raw[:8]), int.from_bytes(raw[8:], "big")
