"""Composition root of the controller: config, etcd, the etcd thread, handlers, the scan.

Requests are taken on the loop and decided on the etcd thread (worker.py); each reply goes
back through the loop. An etcd that is down or slow makes requests fail with
CONTROLLER_NOT_LEADER (retriable) in bounded time; nothing about it stops the controller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ferry.controller.admin import AdminDecisions
from ferry.controller.config import ControllerConfig
from ferry.controller.etcd_state import Etcd
from ferry.controller.handlers import Decisions
from ferry.controller.worker import EtcdWorker, Outcome
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import (
    ControllerCleanBrokerDataRequest,
    ControllerElectMasterRequest,
    ControllerGetMetadataRequest,
    ControllerGetSyncStateDataRequest,
    ControllerHeartbeatRequest,
    ControllerRegisterBrokerRequest,
    Reply,
)
from ferry.runtime.service import Call, Service, announce_ready, dial_address
from ferry.runtime.version import package_version

log = logging.getLogger("ferry.controller")

SERVICE_NAME = "controller"


class ControllerApp:
    """Binds the ROUTER and wires the handlers; run() serves until SIGTERM/SIGINT."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.service = Service(SERVICE_NAME, version=package_version("ferry-controller"))
        endpoint = self.service.bind_router(
            f"tcp://{config.listen_host}:{config.controller_listen_port}"
        )
        self.addr = dial_address(endpoint)
        self.etcd = Etcd(config.endpoints(), config.etcd_timeout_mills / 1000)
        self.decisions = Decisions(config, self.etcd, self.addr)
        self.worker = EtcdWorker(self.service)
        # a broker's heartbeat waits at most this long for etcd: later, its lease would be
        # mostly spent and its sender has given up
        self._deadline_s = max(1.0, config.controller_heart_beat_timeout_mills / 2000)
        d, a = self.decisions, AdminDecisions(self.decisions)
        self._on(ControllerRegisterBrokerRequest, d.register)
        self._on(ControllerHeartbeatRequest, d.heartbeat)
        self._on(ControllerGetSyncStateDataRequest, a.sync_state)
        self._on(ControllerElectMasterRequest, a.elect_master)
        self._on(ControllerCleanBrokerDataRequest, a.clean)
        self._on(ControllerGetMetadataRequest, lambda _req: a.metadata())
        self._scanning = False
        self.service.every(config.scan_not_active_broker_interval / 1000, self._scan, first_s=0)
        self.service.on_stop(self._stop)

    def run(self) -> None:
        announce_ready(SERVICE_NAME, addr=self.addr)
        log.info(
            "controller serving on %s, etcd %s, heartbeat timeout %d ms",
            self.addr,
            ";".join(self.etcd.endpoints),
            self.config.controller_heart_beat_timeout_mills,
        )
        self.service.run()

    def _on(self, request_type: type[Any], decide: Callable[[Any], Reply]) -> None:
        def handler(req: Any, call: Call) -> None:
            self.worker.submit(
                lambda: decide(req), lambda out: _answer(call, out), self._deadline_s
            )

        self.service.on(request_type, handler)

    def _scan(self) -> None:
        if self._scanning:  # the last scan still waits on etcd
            return
        self._scanning = True
        self.worker.submit(self.decisions.scan, self._scanned, self._deadline_s)

    def _scanned(self, outcome: Outcome) -> None:
        self._scanning = False
        if isinstance(outcome, FerryError):
            log.debug("scan: %s", outcome)

    def _stop(self) -> None:
        self.worker.stop()
        self.etcd.close()


def _answer(call: Call, outcome: Outcome) -> None:
    if isinstance(outcome, FerryError):
        call.fail(outcome)
    else:
        call.reply(outcome)
