"""Starts services as processes, waits for their READY lines, stops them cleanly.

Used by `ferry dev up`, `ferry serve` and the integration tests, so that what the tests run is
what users run. Services are started by module (`python -m ferry.store`), never imported here.

The pieces: one process (ferry.runtime.processes), one broker group
(ferry.runtime.broker_group), the layouts of `ferry dev up` (ferry.runtime.layouts); every
name is importable from here, as it always was.
"""

from __future__ import annotations

from ferry.runtime.broker_group import (
    LOOPBACK_ANY,
    LocalCluster,
    security_config,
    security_keys,
    start_broker_services,
    wait_registered,
)
from ferry.runtime.layouts import (
    HA_HEARTBEAT_TIMEOUT_MS,
    HA_REPLICAS,
    OTEL_TRACE_KEYS,
    add_slave_group,
    start_controlled_group,
    start_controller,
    start_local_cluster,
    traces_to,
)
from ferry.runtime.processes import (
    MODULES,
    LaunchError,
    LineRelay,
    LineSink,
    ServiceProcess,
    service_args,
    spawn_service,
    start_service,
    wait_ready,
)

__all__ = [
    "HA_HEARTBEAT_TIMEOUT_MS",
    "HA_REPLICAS",
    "LOOPBACK_ANY",
    "MODULES",
    "OTEL_TRACE_KEYS",
    "LaunchError",
    "LineRelay",
    "LineSink",
    "LocalCluster",
    "ServiceProcess",
    "add_slave_group",
    "security_config",
    "security_keys",
    "service_args",
    "spawn_service",
    "start_broker_services",
    "start_controlled_group",
    "start_controller",
    "start_local_cluster",
    "start_service",
    "traces_to",
    "wait_ready",
    "wait_registered",
]
