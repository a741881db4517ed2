"""The store's retention: expired CommitLog segments deleted on the cleanResourceInterval
timer, at once when the disk is fuller than diskMaxUsedSpaceRatio, and on mqadmin's
deleteExpiredCommitLog. No file is deleted while it is in the flush worker's hands."""

from __future__ import annotations

import logging

from ferry.protocol.messages import DeleteExpiredCommitLogRequest, OkReply
from ferry.runtime.service import Call
from ferry.store.commit_service import CommitService
from ferry.store.store import MessageStore

log = logging.getLogger("ferry.store.app")


class RetentionDuties:
    def __init__(self, store: MessageStore, commit: CommitService) -> None:
        self.store = store
        self._commit = commit

    def delete_expired(self, _req: DeleteExpiredCommitLogRequest, _call: Call) -> OkReply:
        self._commit.flush_now()  # segments not flushed yet are never deleted
        self.clean(manual=True)
        return OkReply()

    def check_disk(self) -> None:
        if self.store.retention.check_disk():  # above diskMaxUsedSpaceRatio: clean at once
            self.clean()

    def clean(self, manual: bool = False) -> None:
        # no file may be in the flush worker's hands while files are deleted
        report = self.store.run_retention(manual=manual, before_delete=self._commit.quiesce)
        if report.deleted_segments:
            log.info(
                "retention: %d segment(s) deleted, log starts at %d, %d queue entries dropped, "
                "disk %.1f%% used",
                report.deleted_segments,
                report.min_offset,
                report.dropped_entries,
                report.used_ratio * 100,
            )
