"""Retention and the disk guard: which CommitLog segments go, and when writes are refused.

RocketMQ's CleanCommitLogService, reduced to what Ferry needs:
- a segment is expired when it was last written more than fileReservedTime hours ago; expired
  segments are deleted, oldest first, during the deleteWhen hours ("04", or "04;05"), or at
  once when asked (DeleteExpiredCommitLogRequest);
- above diskMaxUsedSpaceRatio the oldest segments are deleted at once, expired or not, until
  the disk is below it again;
- above diskSpaceWarningLevelRatio the store refuses writes (DiskFullError) and keeps serving
  reads. The ratio is measured every second and, between those, by the put path itself once
  a quarter of the bytes left below the warning level has been written (guard()), so a fast
  writer is refused before the disk is full, not a second later.
The segment being written is never deleted, nor one holding bytes not yet flushed. Once
segments are gone, ConsumeQueue entries pointing into them are dropped (their queues' min
offsets move forward).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ferry.protocol.errors import ConfigError
from ferry.runtime.config import BrokerConfig
from ferry.store.commit_log import CommitLog
from ferry.store.consume_queue import ConsumeQueueTable

log = logging.getLogger("ferry.store.retention")

HOUR_MS = 3_600_000
DELETE_BATCH = 10  # segments deleted per pass at most (RocketMQ's deleteFileBatchMax)
RECHECK_MIN = 4096  # bytes written between two measurements by the put path, at least


def parse_delete_when(text: str) -> frozenset[int]:
    """deleteWhen: hours of the day separated by ';' ("04", "04;05")."""
    hours: set[int] = set()
    for raw in text.split(";"):
        part = raw.strip()
        if not part:
            continue
        if not part.isdigit() or not 0 <= int(part) <= 23:
            raise ConfigError(f"deleteWhen must be hours 00..23 separated by ';', not {text!r}")
        hours.add(int(part))
    return frozenset(hours)


class RetentionPolicy(NamedTuple):
    reserved_ms: int  # fileReservedTime
    delete_hours: frozenset[int]  # deleteWhen
    max_used_ratio: float  # diskMaxUsedSpaceRatio / 100
    warning_ratio: float  # diskSpaceWarningLevelRatio / 100

    @classmethod
    def from_config(cls, config: BrokerConfig) -> RetentionPolicy:
        check_retention_config(config)
        return cls(
            config.file_reserved_time * HOUR_MS,
            parse_delete_when(config.delete_when),
            config.disk_max_used_space_ratio / 100,
            config.disk_space_warning_level_ratio / 100,
        )


def check_retention_config(config: BrokerConfig) -> None:
    """The store's own checks of the retention keys (ConfigError names the key)."""
    parse_delete_when(config.delete_when)
    if config.file_reserved_time < 0:
        raise ConfigError("fileReservedTime must be 0 hours or more")
    if not 10 <= config.disk_space_warning_level_ratio <= 99:
        raise ConfigError("diskSpaceWarningLevelRatio must be within 10..99")
    if not -1 <= config.disk_used_ratio_override <= 100:
        raise ConfigError("diskUsedRatioOverride must be -1 (measure the disk) or 0..100")
    if config.clean_resource_interval < 10:
        raise ConfigError("cleanResourceInterval must be at least 10 ms")
    if config.sync_flush_timeout < 0:
        raise ConfigError("syncFlushTimeout must be 0 ms or more")


class DiskUsage:
    """How full the file system holding the store is, as a ratio in 0..1 (used / (used +
    available to us), as df shows it). `override_percent` >= 0 replaces the measurement: a
    testing knob (diskUsedRatioOverride) to exercise the guard without filling a disk."""

    def __init__(self, path: Path, override_percent: int = -1) -> None:
        self.path = path
        self.override_percent = override_percent

    def capacity(self) -> tuple[int, int]:
        """(size, bytes available to us) of the file system, as df shows them; (0, 0) when
        it cannot be measured."""
        try:
            st = os.statvfs(self.path)
        except OSError:
            return 0, 0
        return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize

    def used_ratio(self) -> float:
        return self.measure()[0]

    def measure(self) -> tuple[float, int]:
        """(used ratio, bytes usable by us as df counts them: used + available)."""
        st = os.statvfs(self.path)
        used = st.f_blocks - st.f_bfree
        total = used + st.f_bavail
        ratio = used / total if total > 0 else 0.0
        if self.override_percent >= 0:
            ratio = self.override_percent / 100
        return ratio, total * st.f_frsize


class RetentionReport(NamedTuple):
    deleted_segments: int
    min_offset: int  # the CommitLog's min offset afterwards
    dropped_entries: int  # ConsumeQueue entries that pointed into deleted segments
    used_ratio: float


class Retention:
    """Deletes old segments and keeps the disk-full flag; driven by the service's timers."""

    def __init__(
        self, log_: CommitLog, queues: ConsumeQueueTable, policy: RetentionPolicy, disk: DiskUsage
    ) -> None:
        self.log = log_
        self.queues = queues
        self.policy = policy
        self.disk = disk
        self.disk_full = False
        self.used_ratio = 0.0
        self._measure_at = 0  # the CommitLog end at which guard() measures again

    def guard(self, log_end: int) -> None:
        """On the put path: measures again once enough was written since the last time, and
        at every put while writes are refused (they resume as soon as space is freed)."""
        if log_end >= self._measure_at or self.disk_full:
            self.check_disk()

    def refusal(self) -> str:
        """What a refused put says: what is full, how full, and what brings writes back."""
        return (
            f"disk full: the file system of {self.disk.path} is {self.used_ratio:.1%} used, "
            f"at or above diskSpaceWarningLevelRatio {self.policy.warning_ratio:.0%}: the "
            "store refuses writes until space is freed; reads go on"
        )

    def check_disk(self) -> bool:
        """Measures the disk; True when it is above diskMaxUsedSpaceRatio (clean at once)."""
        try:
            ratio, size = self.disk.measure()
        except OSError as exc:  # the store's directory unreadable: keep the last verdict
            log.warning("cannot measure the disk of %s: %s", self.disk.path, exc)
            return False
        self.used_ratio = ratio
        full = ratio >= self.policy.warning_ratio
        # a quarter of what may still be written below the warning level, then look again
        left = int((self.policy.warning_ratio - ratio) * size)
        self._measure_at = self.log.end + max(left // 4, RECHECK_MIN)
        if full != self.disk_full:
            (log.error if full else log.warning)(
                "disk %s is %.1f%% used: writes %s (diskSpaceWarningLevelRatio %.0f%%)",
                self.disk.path,
                ratio * 100,
                "refused" if full else "accepted again",
                self.policy.warning_ratio * 100,
            )
        self.disk_full = full
        return ratio > self.policy.max_used_ratio

    def run(
        self,
        *,
        now_ms: int,
        hour: int,
        manual: bool = False,
        before_delete: Callable[[], None] = lambda: None,
    ) -> RetentionReport:
        """One pass: expired segments (in the deleteWhen hours, or when manual), or the oldest
        ones while the disk is above diskMaxUsedSpaceRatio. before_delete runs once before
        the first file goes (the service waits there for the flush in flight)."""
        pressed = self.check_disk()
        deleted = 0
        if manual or pressed or hour in self.policy.delete_hours:
            expired_before = now_ms - self.policy.reserved_ms
            while deleted < DELETE_BATCH:
                seg = self.log.deletable_head()
                if seg is None:
                    break
                if not pressed and seg.modified_ms() > expired_before:
                    break  # segments are written in order: the later ones are newer still
                if not deleted:
                    before_delete()
                log.info(
                    "retention: deleting CommitLog segment %s (%s)",
                    seg.path.name,
                    "disk above diskMaxUsedSpaceRatio" if pressed else "expired",
                )
                self.log.delete_head()
                deleted += 1
                if pressed:
                    pressed = self.check_disk()
        dropped = 0
        if deleted:
            dropped = self.queues.drop_below(self.log.min_offset)
            self.check_disk()
        return RetentionReport(deleted, self.log.min_offset, dropped, self.used_ratio)
