"""The scheduler's progress file, `<store>/scheduler/progress.json`, replaced atomically.

One snapshot holds everything a restart needs: the next SCHEDULE_TOPIC_XXXX queue offset of
each delay level (RocketMQ's delayOffset.json), the timer topic's next queue offset, the
timer read time (every timer bucket before it is delivered) and `scan_from`, a CommitLog
offset at or below every delivery this snapshot does not cover yet (README: exactly once).
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

FILE_NAME = "progress.json"


class Progress(msgspec.Struct, kw_only=True):
    levels: dict[int, int] = {}  # delay level -> next queue offset
    timer_queue_offset: int = 0
    timer_read_ms: int = 0
    timer_pending: int = 0  # for the status only (a crash may leave it a little off)
    scan_from: int = 0
    saved_ms: int = 0  # wall time of the save: the start-up scan stops a while after it
    # a master's snapshot kept by its slave: a restart from it scans the whole log after
    # scan_from (the master went on delivering for up to a sync interval after saving it)
    adopted: bool = False


def load_progress(root: Path) -> Progress:
    path = root / FILE_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Progress()
    return msgspec.json.decode(raw, type=Progress)


def save_progress(root: Path, progress: Progress, *, sync: bool = True) -> None:
    """Write, fsync, rename over: a reader sees the old snapshot or the new one, never a mix."""
    tmp = root / (FILE_NAME + ".tmp")
    data = msgspec.json.encode(progress)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            os.write(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, root / FILE_NAME)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk: the last snapshot stays, no half file
        raise
