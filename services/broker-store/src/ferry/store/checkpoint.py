"""The checkpoint file: what is known to be on disk, written after every flush.

Layout (big-endian, RocketMQ's StoreCheckpoint order, plus Ferry's offsets and a CRC):
    0 physicMsgTimestamp i64   store time of the last record covered by log_flushed
    8 logicsMsgTimestamp i64   store time of the last record covered by cq_flushed
   16 indexMsgTimestamp i64    not used by the store (0)
   24 log_flushed i64          CommitLog bytes below this offset are on disk
   32 cq_flushed i64           ConsumeQueue entries of every record below this are on disk
   40 crc32 u32                of bytes 0..40; a torn or foreign file reads as no checkpoint
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path
from typing import NamedTuple

LAYOUT = struct.Struct(">qqqqq")
CRC = struct.Struct(">I")
FILE_SIZE = 4096

log = logging.getLogger("ferry.store.checkpoint")


class CheckpointData(NamedTuple):
    log_flushed: int = 0
    cq_flushed: int = 0
    log_store_ms: int = 0
    cq_store_ms: int = 0


class Checkpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:  # its block taken now: a flush on a full disk still records what it made durable
            os.posix_fallocate(self._fd, 0, FILE_SIZE)
        except OSError as exc:
            log.warning("could not reserve %s: %s (written when space allows)", path, exc)

    def read(self) -> CheckpointData | None:
        raw = os.pread(self._fd, LAYOUT.size + CRC.size, 0)
        if len(raw) < LAYOUT.size + CRC.size:
            return None
        (crc,) = CRC.unpack_from(raw, LAYOUT.size)
        if crc != zlib.crc32(raw[: LAYOUT.size]) or not any(raw[: LAYOUT.size]):
            return None
        log_ms, cq_ms, _, log_flushed, cq_flushed = LAYOUT.unpack_from(raw)
        return CheckpointData(log_flushed, cq_flushed, log_ms, cq_ms)

    def write(self, data: CheckpointData) -> None:
        body = LAYOUT.pack(
            data.log_store_ms, data.cq_store_ms, 0, data.log_flushed, data.cq_flushed
        )
        raw = body + CRC.pack(zlib.crc32(body))
        os.pwrite(self._fd, raw.ljust(FILE_SIZE, b"\0"), 0)
        os.fdatasync(self._fd)

    def close(self) -> None:
        os.close(self._fd)
