"""Multipart sends and receives with plain int flags.

pyzmq's send_multipart/recv_multipart OR its flag enums once per frame, which costs about as
much as the sends themselves (22.9 → 12.1 µs per 4-frame send+recv pair,
docs/perf-notes/2026-11-22-sdk-optimisation.md).
Every hot path (SDK requests, the services' requests, replies and feeds) goes through these.
"""

from __future__ import annotations

from typing import Any

import zmq

NOBLOCK = int(zmq.NOBLOCK)
SNDMORE = int(zmq.SNDMORE)
RCVMORE = int(zmq.RCVMORE)
EVENTS = int(zmq.EVENTS)
POLLIN = int(zmq.POLLIN)


def send_frames(
    sock: zmq.Socket[Any], frames: list[Any], flags: int = 0, copy: bool = True
) -> None:
    """send_multipart with int flags. Atomic as a multipart message is: zmq.Again can only
    come from the first frame."""
    more = flags | SNDMORE
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        sock.send(frame, more if i < last else flags, copy=copy)


def recv_frames(sock: zmq.Socket[Any], flags: int = 0) -> list[bytes]:
    """recv_multipart with int flags: every frame as bytes."""
    frames: list[bytes] = [sock.recv(flags)]
    while sock.get(RCVMORE):
        frames.append(sock.recv(flags))
    return frames


def recv_ready(sock: zmq.Socket[Any]) -> list[bytes] | None:
    """The next waiting message, or None when there is none. Asks the socket first instead
    of catching zmq.Again: every drain loop ends on an empty socket, and building that
    exception (with its strerror) costs more than the question."""
    if not int(sock.get(EVENTS)) & POLLIN:
        return None
    try:
        return recv_frames(sock, NOBLOCK)
    except zmq.Again:  # EVENTS is a hint; a ROUTER may still have nothing whole to give
        return None


def recv_ready_peer(sock: zmq.Socket[Any]) -> tuple[list[Any], str] | None:
    """recv_ready, and the sender's IP address ("" over ipc://), read from the first frame's
    metadata (ZeroMQ keeps it on every part of a message)."""
    if not int(sock.get(EVENTS)) & POLLIN:
        return None
    try:
        first = sock.recv(NOBLOCK, copy=False)
    except zmq.Again:
        return None
    try:
        ip = first.get("Peer-Address") or ""
    except (zmq.ZMQError, ValueError):
        ip = ""
    frames: list[Any] = [first.bytes]
    while sock.get(RCVMORE):
        frames.append(sock.recv(NOBLOCK))
    return frames, str(ip)
