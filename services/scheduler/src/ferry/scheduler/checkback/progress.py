"""The checker's progress on disk: the next offset to read in each of the three transaction
queues and the table as it stood there (pending half messages with their check counts, early
ends, commit marks), saved together in one file replaced atomically, so a restart resumes from
a consistent state: records after the offsets are read again, and reading them again changes
nothing."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("ferry.scheduler.checkback")

FILE_NAME = "transactionCheck.json"
VERSION = 2  # 1 was a CommitLog offset: such a file is read as no file (the queues from 0)


@dataclass
class Progress:
    # next queue offset to read of RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC and
    # TRANS_CHECK_MAX_TIME_TOPIC (queue 0 each); 0 at first: from the queue's start
    offsets: dict[str, int] = field(default_factory=dict)
    table: dict[str, Any] = field(default_factory=dict)  # HalfTable.dump()


def load(directory: Path) -> Progress:
    path = directory / FILE_NAME
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Progress()
    except (OSError, ValueError) as exc:
        # a damaged file must not stop the scheduler: reading the queues again rebuilds it
        log.error("%s unreadable (%s); reading the transaction queues from their start", path, exc)
        return Progress()
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        log.error("%s has another layout; reading the transaction queues from their start", path)
        return Progress()
    offsets = {str(k): int(v) for k, v in dict(raw.get("offsets", {})).items()}
    return Progress(offsets, dict(raw.get("table", {})))


def save(directory: Path, progress: Progress) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / FILE_NAME
    tmp = path.with_suffix(".tmp")
    data = {"version": VERSION, "offsets": progress.offsets, "table": progress.table}
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
