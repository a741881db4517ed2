"""`make test` runs the suite in two phases (docs/perf-notes/2026-11-28-suite-time.md):

    pytest -n 2 --dist loadgroup -m "not serial"   # the rest, on two workers
    pytest -n 2 --dist loadgroup -m serial         # the timing-bound tests: the heavy ones
                                                   # on one worker, in turn (HEAVY_MODULES)

Which tests are `serial` is decided here and nowhere else (SERIAL_MODULES, SERIAL_MARKERS):
tests that wait on elections, leases, heartbeats, restarts or the supervisor, assert on
elapsed time, or start Docker stacks, Spark or a browser. With everything on two workers
those loaded the 2 cores to 12-16 and timing-bound tests failed that pass alone
(2026-11-27). In both phases each test file stays on one worker (group_of, below), so its
module fixtures start their clusters once.

The end of a run is guarded: a test that leaked a thread that is not a daemon, or an exit
handler that hangs (an exporter retrying a closed endpoint), must not keep the run from
ending after its summary. Either is named, with every thread's stack, and the run exits
with its own status."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

EXIT_GRACE_S = 60.0  # exit handlers get this long after the summary


# Markers whose tests all run serial: Docker stacks, Spark sessions (one JVM a worker).
SERIAL_MARKERS = ("e2e", "spark")

# Test modules that run serial, by path from the repository's root.
SERIAL_MODULES = frozenset(
    {
        # (elections, leases, failover and HA replication: HEAVY_MODULES below)
        # supervision: kills, hangs and restarts within bounds
        "tests/integration/test_supervision.py",
        "tests/integration/test_faults_under_load.py",
        "tests/integration/test_checkback_process.py",
        "tests/integration/test_recovery_after_restart.py",
        "tests/integration/test_store_crash.py",
        "tests/integration/test_disk_full.py",
        "tests/integration/test_slave_disk_full.py",
        "services/proxy/tests/test_proxy_faults.py",
        # elapsed time asserted: delays, timers, invisible times, timeouts
        "tests/integration/test_delay.py",
        "tests/integration/test_timer.py",
        "tests/integration/test_pop_consumer.py",
        "tests/integration/test_producer_faults.py",
        "tests/integration/test_send_consume.py",
        "sdk/tests/test_client_cluster.py",
        "sdk/tests/test_client_transport.py",
        "libs/runtime/tests/test_service.py",
        "libs/protocol/tests/test_sql_filter.py",
        # a headless Chromium beside a cluster
        "tests/browser/test_console_browser.py",
        "tests/browser/test_console_login.py",
    }
)


# The serial phase runs on two workers too, but the modules that start several broker trees,
# a controller on etcd or a Docker stack run one after another on one of them (xdist group
# "heavy"), so at most one of them loads the machine at a time; the other worker takes the
# lighter timing-bound files, and the Spark files together (one JVM).
HEAVY_MODULES = frozenset(
    {
        "tests/integration/test_controller.py",
        "tests/integration/test_failover.py",
        "tests/integration/test_failover_fencing.py",
        "tests/integration/test_failover_history.py",
        "tests/integration/test_two_groups.py",
        "tests/integration/test_write_lease.py",
        "tests/integration/test_isr_enforcement.py",
        "tests/integration/test_ha_replication.py",
        "tests/integration/test_ha_delays.py",
        "tests/integration/test_ha_consumers.py",
        "tests/integration/test_ha_cli.py",
        "tests/integration/test_dev_up_ha.py",
        "tests/integration/test_admin_store_ha.py",
        "tests/integration/test_pop_replication.py",
        "tests/integration/test_tracing_ha.py",
        "tests/integration/test_rocketmq_failover.py",
    }
)


def pytest_configure(config: pytest.Config) -> None:
    # a renamed module must not move to the parallel phase unnoticed
    root = Path(__file__).parent
    gone = sorted(m for m in SERIAL_MODULES | HEAVY_MODULES if not (root / m).is_file())
    if gone:
        raise pytest.UsageError(f"conftest.py: SERIAL_MODULES names missing files: {gone}")


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def is_serial(item: pytest.Item) -> bool:
    if _module(item) in SERIAL_MODULES | HEAVY_MODULES:
        return True
    return any(item.get_closest_marker(name) for name in SERIAL_MARKERS)


def group_of(nodeid: str) -> str:
    """The xdist work unit a test belongs to: its file, or "heavy" (HEAVY_MODULES and the
    Docker tests, one after another on one worker), or "spark" (every Spark file: one JVM)."""
    module = nodeid.split("::", maxsplit=1)[0]
    if module in HEAVY_MODULES or module.startswith("tests/e2e/"):
        return "heavy"
    if module.startswith("spark/"):
        return "spark"
    return module


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Both phases' scheduler: whole work units (group_of) to a worker. xdist's own loadgroup
    cannot do it under pytest 9: it names a test's group by rewriting `item._nodeid`, which
    pytest 9 no longer reads (nodeid comes from `item._id`), so every test was a unit of its
    own: a module's cluster started on both workers, and a module's order-bound tests split
    between them."""
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class FileGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return FileGroups(config, log)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the marker added here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if is_serial(item):
            item.add_marker(pytest.mark.serial)


EXIT_STATUS = pytest.StashKey[int]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[EXIT_STATUS] = int(exitstatus)


def _exit_now(why: str, status: int) -> None:
    sys.stderr.write(f"conftest: {why}; exiting with the run's status {status}; stacks:\n")
    faulthandler.dump_traceback(sys.stderr, all_threads=True)
    sys.stdout.flush()
    os._exit(status)


def _watch_exit(status: int) -> None:
    time.sleep(EXIT_GRACE_S)  # wait-ok: a watchdog over the interpreter's exit
    _exit_now(f"the interpreter did not exit within {EXIT_GRACE_S:.0f} s of the summary", status)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: its controller ends the run
    status = config.stash.get(EXIT_STATUS, 0)
    stuck = [
        t
        for t in threading.enumerate()
        if t is not threading.main_thread() and not t.daemon and t.is_alive()
    ]
    if stuck:
        _exit_now(f"leaked non-daemon threads: {', '.join(t.name for t in stuck)}", status)
    watchdog = threading.Thread(target=_watch_exit, args=(status,), name="exit-watchdog")
    watchdog.daemon = True
    watchdog.start()


# ---- shared fixtures ----------------------------------------------------------------------


@contextmanager
def _door_cluster(
    root: Path,
    *,
    topic: str = "",
    queues: int = 4,
    overrides: dict[str, str] | None = None,
) -> Iterator[Any]:
    """A local cluster with both RocketMQ doors, its broker registered, `topic` created if
    named (the door tests of services/broker-remoting)."""
    from ferry.admin import Admin
    from ferry.runtime.launcher import start_local_cluster
    from ferry.runtime.testing.pytest_support import wait_for

    local = start_local_cluster(str(root), rocketmq_port=0, overrides=overrides)
    try:
        assert local.broker_rocketmq_addr
        with Admin(local.namesrv_addr) as admin:  # READY comes before the registration
            wait_for(admin.master_addrs, 15, "the broker to register")
            if topic:
                admin.create_topic(topic, queues, queues)
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def door_cluster() -> Any:
    """door_cluster(root, topic=..., queues=..., overrides=...): a context manager."""
    return _door_cluster
