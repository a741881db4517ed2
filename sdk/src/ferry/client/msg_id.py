"""Client-generated unique message ids (the UNIQ_KEY property, RocketMQ's msgId).

16 bytes, written as 32 upper-case hex digits: IPv4 of the client (4), process id (2), a random
number fixed per generator (4), milliseconds since the start of the current month (4), and a
counter (2). The first 10 bytes are fixed per generator, so they are formatted once.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import random
import socket
import threading
import time

MSG_ID_HEX_LEN = 32


def month_start_ms(now_ms: int) -> tuple[int, int]:
    """(start of the month containing now_ms, start of the next month), UTC, in ms."""
    now = dt.datetime.fromtimestamp(now_ms / 1000, tz=dt.UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if start.month == 12:
        following = start.replace(year=start.year + 1, month=1)
    else:
        following = start.replace(month=start.month + 1)
    return int(start.timestamp() * 1000), int(following.timestamp() * 1000)


# the id's last 4 digits, formatted once: a lookup costs a fifth of a format per id
_HEX4 = [f"{i:04X}" for i in range(0x10000)]


class MessageIdGenerator:
    """Thread-safe; one per client."""

    def __init__(self, ip: str = "127.0.0.1", pid: int | None = None) -> None:
        try:
            ip_raw = socket.inet_aton(ip)
        except OSError:
            ip_raw = bytes(4)
        pid_raw = ((os.getpid() if pid is None else pid) & 0xFFFF).to_bytes(2, "big")
        salt = random.getrandbits(32).to_bytes(4, "big")
        self.prefix = (ip_raw + pid_raw + salt).hex().upper()
        self._counter = itertools.count(random.getrandbits(16))
        self._lock = threading.Lock()
        self._month_start, self._next_month = month_start_ms(int(time.time() * 1000))
        # (ms, the id's first 28 digits for that ms): ids of one millisecond share them
        self._head = (-1, "")

    def next_id(self) -> str:
        count = next(self._counter) & 0xFFFF  # next() on a count is atomic in CPython
        return self._head_now() + _HEX4[count]

    def next_ids(self, n: int) -> list[str]:
        """n ids at once (a batch being encoded)."""
        head = self._head_now()
        counter = self._counter
        return [head + _HEX4[next(counter) & 0xFFFF] for _ in range(n)]

    def _head_now(self) -> str:
        now_ms = int(time.time() * 1000)
        head = self._head  # one tuple: read and written whole, so threads never mix halves
        if head[0] != now_ms:
            if now_ms >= self._next_month:
                with self._lock:
                    if now_ms >= self._next_month:
                        self._month_start, self._next_month = month_start_ms(now_ms)
            delta = max(0, now_ms - self._month_start) & 0xFFFFFFFF
            head = self._head = (now_ms, f"{self.prefix}{delta:08X}")
        return head[1]


def local_ip(towards: str = "") -> str:
    """The IPv4 this host uses to reach `towards` ("host:port"), else a best guess.

    A UDP connect sends nothing; it only asks the kernel for the route's source address.
    """
    host = towards.rpartition(":")[0] if towards else ""
    if host:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((host, 9))
                addr = str(probe.getsockname()[0])
                if addr and addr != "0.0.0.0":
                    return addr
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def decode_msg_id(msg_id: str, now_ms: int | None = None) -> tuple[str, int, int]:
    """(client IPv4, process id (low 16 bits), send time in ms) of a unique message id
    (mqadmin DecodeMessageId). The id holds only the time since the start of a month: the
    month taken is the current one, or the one before when that would lie in the future."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raw = b""
    if len(raw) != MSG_ID_HEX_LEN // 2:
        raise ValueError(f"{msg_id!r} is not a message id ({MSG_ID_HEX_LEN} hex digits)")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    start, _ = month_start_ms(now)
    sent = start + int.from_bytes(raw[10:14], "big")
    if sent > now + 60_000:  # sent last month (a minute's leeway for clock skew)
        start, _ = month_start_ms(start - 1)
        sent = start + int.from_bytes(raw[10:14], "big")
    return socket.inet_ntoa(raw[:4]), int.from_bytes(raw[4:6], "big"), sent
