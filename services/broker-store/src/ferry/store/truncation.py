"""A one-shot request to cut the CommitLog at start-up: the file `truncateCommitLogTo` under
storePathRootDir holds an offset. The broker agent (controller mode) writes it, with the store
stopped, when the broker rejoins its group as a slave and holds bytes the group did not keep;
the store cuts its log there as recovery cuts a torn tail (ConsumeQueue entries past it go
too), makes the cut durable, and only then removes the file, so a crash in between cuts again
at the same offset and nothing written after the cut is ever cut by it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ferry.protocol.errors import ConfigError
from ferry.runtime.files import fsync_dir
from ferry.store.commit_log import CommitLog

log = logging.getLogger("ferry.store.truncation")

FILE_NAME = "truncateCommitLogTo"


def request(root: Path, offset: int) -> None:
    """Asks the next start of the store under `root` to cut its log at `offset`."""
    path = root / FILE_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{offset}\n", encoding="ascii")
    tmp.replace(path)
    fsync_dir(root)


def read(root: Path) -> int | None:
    path = root / FILE_NAME
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    if not text.isdigit():
        raise ConfigError(f"{path} must hold one CommitLog offset, not {text!r}")
    return int(text)


def done(root: Path, log_: CommitLog) -> None:
    """The cut is made: the segment it ended in is synced, then the request removed."""
    path = root / FILE_NAME
    if not path.exists():
        return
    for seg in log_.segments[-1:]:
        seg.sync()
    path.unlink()
    fsync_dir(root)
    log.info("the CommitLog was cut at %d as asked; %s removed", log_.end, FILE_NAME)
