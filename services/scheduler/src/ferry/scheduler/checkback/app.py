"""Composition root of the transaction check-back service: one TransactionChecker (checker.py)
on its own Service, so that a crash here costs only the checks, and the scheduler's delays and
timers go on (and the other way round).

Start-up: lock <store>/checkback, load the saved progress (moved from <store>/scheduler where
an older Ferry kept it), bind, print READY, start following the transaction queues. A slave's
check-back only answers: checks are its master's to make, as RocketMQ runs them on masters.
"""

from __future__ import annotations

import logging
import os

from ferry.protocol.messages import (
    TransactionChecksRequest,
    TransactionCheckStatusReply,
    TransactionCheckStatusRequest,
    TransactionStateRequest,
)
from ferry.runtime import metrics
from ferry.runtime.dir_lock import DirLock
from ferry.runtime.service import Call, Service, announce_ready
from ferry.runtime.version import package_version
from ferry.scheduler.checkback import progress
from ferry.scheduler.checkback.checker import CheckerSettings, TransactionChecker
from ferry.scheduler.checkback.config import CheckbackConfig

log = logging.getLogger("ferry.scheduler.checkback")

SERVICE_NAME = "checkback"


def adopt_old_progress(config: CheckbackConfig) -> None:
    """Where the scheduler hosted the checker, its progress is under <store>/scheduler: take
    it over once, so that an upgrade neither checks again nor forgets a pending half."""
    old = config.scheduler_dir_of_old / progress.FILE_NAME
    new = config.checkback_dir / progress.FILE_NAME
    if old.exists() and not new.exists():
        os.replace(old, new)
        log.info("took over the transaction check progress from %s", old)


class CheckbackApp:
    def __init__(self, config: CheckbackConfig) -> None:
        self.config = config
        self.root = config.checkback_dir
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock = DirLock(self.root, SERVICE_NAME)
        adopt_old_progress(config)
        self.service = Service(
            SERVICE_NAME,
            max_deferred=config.max_pending_requests,
            version=package_version("ferry-scheduler"),
        )
        store = self.service.connect_peer(config.store_endpoint)
        # a killed store never answers its held long polls: they are asked again at once
        store.fail_pending_when_lost()
        self.slave = config.broker_role == "SLAVE"
        self.checker = TransactionChecker(
            self.service, store, CheckerSettings.from_config(config), self.root
        )
        # remoting may poll before the readers catch up: a poll is held until checks are due
        self.service.on(TransactionChecksRequest, self.checker.handle_checks)
        self.service.on(TransactionStateRequest, self.checker.handle_state)
        self.service.on(TransactionCheckStatusRequest, self._status)
        if metrics.enabled():
            from ferry.scheduler.checkback.checkback_metrics import CheckbackMetrics

            CheckbackMetrics(self.checker)
        self._closed = False
        self.service.on_stop(self.close)

    def run(self) -> None:
        endpoint = self.service.bind_router(self.config.listen_endpoint())
        announce_ready(SERVICE_NAME, endpoint=endpoint)
        log.info("check-back serving on %s; store %s", endpoint, self.config.store_endpoint)
        if self.slave:
            log.info("broker role SLAVE: no half message is checked here (the master's are)")
        else:
            self.checker.start()
        self.service.run()

    def _status(
        self, _req: TransactionCheckStatusRequest, _call: Call
    ) -> TransactionCheckStatusReply:
        return TransactionCheckStatusReply(
            role=self.config.broker_role, figures=self.checker.status()
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if not self.slave:
                self.checker.stop()
        finally:
            self.lock.release()
