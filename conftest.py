"""Runs by hand with xdist (`pytest -n 2 --dist loadgroup`): each test file stays on one worker,
so its module fixtures start their clusters once, and every Docker test shares one worker,
since they share the engine, the images and compose project names.

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

import pytest

EXIT_GRACE_S = 60.0  # exit handlers get this long after the summary


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = "docker" if item.get_closest_marker("e2e") else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))


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
