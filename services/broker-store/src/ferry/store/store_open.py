"""Opening a MessageStore: the directory's lock, the files mapped and loaded, recovery run
and reported, then the store built over them (MessageStore.open)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ferry.runtime.config import BrokerConfig
from ferry.runtime.dir_lock import DirLock, LastStop
from ferry.store import truncation
from ferry.store.checkpoint import Checkpoint, CheckpointData
from ferry.store.commit_log import CommitLog
from ferry.store.consume_queue import ConsumeQueueTable
from ferry.store.mapped_file import make_dirs
from ferry.store.recovery import recover
from ferry.store.retention import DiskUsage, Retention, RetentionPolicy

if TYPE_CHECKING:
    from ferry.store.store import MessageStore

log = logging.getLogger("ferry.store")


def open_store(cls: type[MessageStore], config: BrokerConfig) -> MessageStore:
    """Takes the directory's lock, maps the files and recovers; raises DirLockedError when
    another store holds the directory."""
    policy = RetentionPolicy.from_config(config)  # ConfigError before anything is touched
    root = config.store_root.resolve()
    make_dirs(root)
    lock = DirLock(root, "broker-store")
    parts: list[CommitLog | ConsumeQueueTable | Checkpoint] = []
    started = time.monotonic()
    try:
        checkpoint = Checkpoint(root / "checkpoint")
        parts.append(checkpoint)
        commit_log = CommitLog(root / "commitlog", config.mapped_file_size_commit_log)
        parts.append(commit_log)
        commit_log.load()
        queues = ConsumeQueueTable(root / "consumequeue", config.mapped_file_size_consume_queue)
        parts.append(queues)
        queues.load()
        clean = lock.last_stop() is LastStop.CLEAN
        saved = checkpoint.read()
        cut_at = truncation.read(root)
        report = recover(commit_log, queues, saved, cut_at)
        (log.info if clean else log.warning)(
            "%s; log end %d (verified from %d), %d entries dropped, %d re-dispatched; "
            "files loaded and checked in %.0f ms",
            "clean start" if clean else "the last run did not stop cleanly: recovered",
            report.log_end,
            report.scanned_from,
            report.dropped_entries,
            report.redispatched,
            (time.monotonic() - started) * 1000,
        )
        store = cls(
            root,
            lock,
            checkpoint,
            commit_log,
            queues,
            Retention(commit_log, queues, policy, DiskUsage(root, config.disk_used_ratio_override)),
            max_message_size=config.max_message_size,
            store_host=f"{config.advertised_host}:{config.listen_port}",
        )
        store.last_store_ms = max((cq.last_store_ms for cq in queues.queues.values()), default=0)
        store._written = saved or CheckpointData()
        store.recovery = report
        truncation.done(root, commit_log)
        store.retention.check_disk()
        lock.mark_running()
    except BaseException:
        for part in reversed(parts):
            part.close()
        lock.release()
        raise
    return store
