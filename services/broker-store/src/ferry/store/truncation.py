"""A one-shot request to cut the CommitLog at start-up (ferry.runtime.epoch_file writes and
reads it): the file `truncateCommitLogTo` under storePathRootDir holds an offset. The broker
agent (controller mode) writes it when the broker rejoins its group as a slave and holds bytes
the group did not keep, then restarts the store; the store cuts its log there as recovery
cuts a torn tail (ConsumeQueue entries past it go too), makes the cut durable, and only then
removes the file, so a crash in between cuts again at the same offset and nothing written
after the cut is ever cut by it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ferry.runtime import epoch_file
from ferry.runtime.files import fsync_dir
from ferry.store.commit_log import CommitLog

log = logging.getLogger("ferry.store.truncation")

FILE_NAME = epoch_file.CUT_FILE
request = epoch_file.request_cut
read = epoch_file.read_cut


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
