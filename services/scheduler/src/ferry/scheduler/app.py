"""Composition root of the scheduler: progress, the delivery path, the delay levels, the
timers, the status request, and (COMPONENTS below) whatever else runs in this process.
Transaction check-back runs in a process of its own (checkback/), not here.

Start-up: lock the directory, load the progress snapshot, bind, print READY, scan the log from
the snapshot's `scan_from` (recovery.py), then start every component. Progress is saved every
schedulerFlushIntervalMs when it moved, and on a clean stop.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec

from ferry.protocol.errors import NoPermissionError
from ferry.protocol.messages import (
    AnyReply,
    OkReply,
    SchedulerAdoptProgressRequest,
    SchedulerProgress,
    SchedulerProgressReply,
    SchedulerProgressRequest,
    SchedulerStatusReply,
    SchedulerStatusRequest,
    StoreStatusReply,
    StoreStatusRequest,
)
from ferry.runtime import metrics
from ferry.runtime.dir_lock import DirLock
from ferry.runtime.service import Call, Service, announce_ready
from ferry.runtime.version import package_version
from ferry.scheduler.component import Component
from ferry.scheduler.config import SchedulerConfig
from ferry.scheduler.delay import DelayLevels
from ferry.scheduler.delivery import HOLDING_TOPICS, Deliverer
from ferry.scheduler.progress import FILE_NAME as PROGRESS_FILE
from ferry.scheduler.progress import Progress, load_progress, save_progress
from ferry.scheduler.recovery import SCAN_GRACE_MS, StartupScan
from ferry.scheduler.revive import ReviveService
from ferry.scheduler.scheduler_metrics import SchedulerMetrics
from ferry.scheduler.timers import Timers

log = logging.getLogger("ferry.scheduler")

SERVICE_NAME = "scheduler"
STORE_TIMEOUT_S = 5.0
STORE_RETRY_S = 0.5


class SchedulerApp:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.root = config.scheduler_dir
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock = DirLock(self.root, "scheduler")
        # no snapshot yet: nothing was delivered from this directory, no log to re-check
        self.fresh = not (self.root / PROGRESS_FILE).exists()
        self.progress = load_progress(self.root)
        self.service = Service(
            SERVICE_NAME,
            max_deferred=config.max_pending_requests,
            version=package_version("ferry-scheduler"),
        )
        self.store = self.service.connect_peer(config.store_endpoint)
        # a killed store never answers its held long polls: they are asked again at once
        self.store.fail_pending_when_lost()
        self.deliverer = Deliverer(self.service, self.store)
        self.deliverer.see(self.progress.scan_from)
        self.delays = DelayLevels(
            self.service, self.store, self.deliverer, config.delay_levels_ms, self.progress
        )
        self.timers = Timers(
            self.service,
            self.store,
            self.deliverer,
            self.root / "timer",
            config.timer_precision_ms,
            self.progress,
        )
        # ---- COMPONENTS: everything that runs in this process, started after the start-up
        # scan and stopped before the last save. Add a part here (start/stop/status, see
        # component.py); it may use self.service, self.store and self.config.
        # pop consumption's checkpoints, acks and revivals (revive.py)
        self.revive = ReviveService(self.service, self.store, config.broker_cluster_name, self.root)
        self.components: list[Component] = [self.delays, self.timers, self.revive]
        # ---- end of COMPONENTS
        if metrics.enabled():
            SchedulerMetrics(self)
        self._started = False
        self._closed = False
        # a slave's scheduler delivers nothing and saves nothing of its own: its progress is
        # the master's, adopted through remoting's slave sync
        self._slave = config.broker_role == "SLAVE"
        self.adopted = 0
        self.service.on(SchedulerStatusRequest, self._status)
        self.service.on(SchedulerProgressRequest, self._progress)
        self.service.on(SchedulerAdoptProgressRequest, self._adopt)
        self.service.every(config.scheduler_flush_interval_ms / 1000, self._save)
        self.service.on_stop(self.close)

    def run(self) -> None:
        endpoint = self.service.bind_router(self.config.listen_endpoint())
        announce_ready(SERVICE_NAME, endpoint=endpoint)
        log.info(
            "scheduler serving on %s; store %s; resuming from %s",
            endpoint,
            self.config.store_endpoint,
            self.progress,
        )
        if self.fresh:
            self._first_start()
        elif self._slave:  # it delivers nothing: no delivery to look for in the log
            self._on_scanned(set(), self.progress.scan_from)
        else:
            saved = self.progress.saved_ms
            until = saved + SCAN_GRACE_MS if saved and not self.progress.adopted else 0
            scan = StartupScan(
                self.service, self.store, HOLDING_TOPICS, self._on_scanned, until_ms=until
            )
            scan.run(self.progress.scan_from)
        self.service.run()

    def _first_start(self) -> None:
        """No snapshot: start from the log's end (a long log need not be read) and save a
        snapshot before the first delivery, so that a crash after it has one to resume from."""

        def on_status(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, StoreStatusReply):
                self._on_scanned(set(), body.max_offset)
                self._save(force=True)  # a slave's stays unsaved until it adopts one
            else:
                log.warning("the store did not give its log bounds (%s); asking again", body)
                self.service.later(STORE_RETRY_S, self._first_start)

        self.store.request(StoreStatusRequest(), on_status, timeout_s=STORE_TIMEOUT_S)

    def _on_scanned(self, delivered: set[int], log_end: int) -> None:
        self.deliverer.done_before = delivered
        self.deliverer.see(log_end)
        self._started = True
        if self._slave:
            # a slave's store takes only what replication brings: nothing is delivered here
            # (the master's scheduler does it), as RocketMQ runs its schedule service on
            # masters; the timers are taken in, to be delivered if it is restarted as master
            log.info("broker role SLAVE: nothing is delivered here; timers are taken in")
            self.timers.follow(self.progress.timer_read_ms)
            return
        for component in self.components:
            component.start()

    # ---- progress ----

    def snapshot(self) -> Progress:
        """The progress as it stands; scan_from is at or below every delivery it does not
        cover (issued, or done but not yet counted in the offsets and the timer read time)."""
        scan_from = min(
            self.delays.oldest_uncovered(self.deliverer.watermark),
            self.timers.oldest_uncovered(self.deliverer.watermark),
        )
        return Progress(
            levels=self.delays.offsets(),
            timer_queue_offset=self.timers.queue_offset,
            timer_read_ms=self.timers.read_ms,
            timer_pending=self.timers.pending,
            scan_from=scan_from,
            saved_ms=int(time.time() * 1000),
        )

    def _save(self, *, force: bool = False) -> None:
        if not self._started or self._slave:
            return
        snapshot = self.snapshot()
        unchanged = msgspec.structs.replace(snapshot, saved_ms=self.progress.saved_ms)
        if unchanged == self.progress and not force:
            return
        self.timers.sync()  # bucket files hold what the snapshot says was taken in
        save_progress(self.root, snapshot)
        self.progress = snapshot
        self.timers.saved(snapshot.timer_read_ms)

    # ---- progress across master and slave ----

    def _progress(self, _req: SchedulerProgressRequest, _call: Call) -> SchedulerProgressReply:
        p = self.progress
        if not p.saved_ms:
            return SchedulerProgressReply()  # nothing saved yet
        fields = SchedulerProgress.__struct_fields__  # the wire's subset of the snapshot
        return SchedulerProgressReply(
            progress=SchedulerProgress(**{name: getattr(p, name) for name in fields})
        )

    def _adopt(self, req: SchedulerAdoptProgressRequest, _call: Call) -> OkReply:
        """A slave's scheduler takes the master's snapshot as its own (when newer): the slave
        restarted as master resumes the delay levels there, and its start-up scan of the
        same log from `scan_from` skips what the master delivered after the snapshot."""
        if not self._slave:
            raise NoPermissionError("only a slave's scheduler adopts its master's progress")
        theirs = req.progress
        if theirs.saved_ms <= self.progress.saved_ms:
            return OkReply()  # this one or a newer one is on disk already
        timers = self.timers
        timers.adopt_read_ms(theirs.timer_read_ms)
        adopted = Progress(
            levels=dict(theirs.levels),
            # the timers' intake is this scheduler's own (its bucket files), the read time the
            # master's: buckets before it were delivered there
            timer_queue_offset=timers.queue_offset,
            timer_read_ms=timers.read_ms,
            scan_from=theirs.scan_from,
            saved_ms=theirs.saved_ms,
            adopted=True,
        )
        timers.sync()  # the bucket files hold what the snapshot says was taken in
        save_progress(self.root, adopted)
        self.progress = adopted
        timers.saved(adopted.timer_read_ms)
        self.adopted += 1
        return OkReply()

    # ---- requests ----

    def _status(self, _req: SchedulerStatusRequest, _call: Call) -> SchedulerStatusReply:
        extra: dict[str, str] = {}
        for component in self.components:
            extra.update(component.status())
        if self._slave:  # what a restart as master would resume from
            extra["slaveProgressAdopted"] = str(self.adopted)
            extra["slaveProgressSavedMs"] = str(self.progress.saved_ms)
            extra["slaveTimerReadMs"] = str(self.timers.read_ms)
            extra.update(
                (f"slaveScheduleOffset_{level}", str(offset))
                for level, offset in sorted(self.progress.levels.items())
            )
        return SchedulerStatusReply(
            levels=self.delays.level_status(),
            timer_queue_offset=self.timers.queue_offset,
            timer_queue_max=self.timers.queue_max,
            timer_pending=self.timers.pending,
            timer_read_ms=self.timers.read_ms,
            timer_delivered=self.timers.delivered,
            skipped_duplicates=self.deliverer.skipped,
            extra=extra,
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._started:
                for component in reversed(self.components):
                    try:
                        component.stop()
                    except Exception:
                        log.exception("component %s did not stop cleanly", component.name)
                self._save()
            self.timers.close()
        finally:
            self.lock.release()
