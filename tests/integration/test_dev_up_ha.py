"""`ferry dev up --ha` (issue 26.6): etcd, the controller and three replicas of broker-a, each
a `ferry serve broker` tree under the dev supervisor. Killing the master's whole tree (a lost
machine) elects another replica; the dev supervisor brings the tree back, as a slave."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from itest_support import FERRY, DevUp, children_of, wait_for
from supervision_support import cmdline

from ferry.admin import Admin, ControllerAdmin
from ferry.client import FerryError, Message, Producer, SendStatus

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def group_state(controller: str) -> Any:
    with ControllerAdmin(controller) as admin:
        groups = admin.sync_state_set(broker_names=["broker-a"])
    return groups[0] if groups else None


def tree_of(dev: DevUp, replica: int) -> int:
    """The pid of the `ferry serve broker` tree of one replica."""
    for pid in children_of(dev.proc.pid):
        args = cmdline(pid)
        if "serve" in args and "broker" in args and f"brokerId={replica}" in args:
            return pid
    raise AssertionError(f"no tree of replica {replica}")


def send_ok(producer: Producer) -> bool:
    try:
        return producer.send(Message("DevHa", b"x")).status == SendStatus.SEND_OK
    except FerryError:
        return False


def test_dev_up_ha_elects_a_master_and_another_when_its_tree_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lost tree comes back after 10 s, well after the controller's lease (3 s heartbeat
    # timeout) lapsed: with 2 s, a fast machine had it back and re-registered before the
    # lease ran out, and it stayed master at epoch 1 (correct: no one had replaced it).
    monkeypatch.setenv("FERRY_RESTART_POLICY", "first_wait=10,max_wait=20")
    dev = DevUp(tmp_path / "data", "--ha", timeout=240)
    try:
        namesrv, controller = dev.fields["namesrv"], dev.fields["controller"]
        first = wait_for(lambda: group_state(controller), 30, "the group's state")
        assert first.master_id in (1, 2, 3) and first.epoch == 1
        with Admin(namesrv) as admin:
            admin.create_topic("DevHa", 2, 2)
        with Producer("pg-dev-ha", namesrv, send_timeout_ms=3000) as producer:
            wait_for(lambda: send_ok(producer), 30, "a send to the elected master")
            tree = tree_of(dev, first.master_id)
            machine = {tree, *children_of(tree)}
            killed_at = time.monotonic()
            for pid in machine:  # the whole tree at once: a lost machine
                os.kill(pid, signal.SIGKILL)
            wait_for(lambda: send_ok(producer), 60, "a send to a new master")
            took = time.monotonic() - killed_at
        second = group_state(controller)
        assert second.master_id != first.master_id and second.epoch == 2
        print(f"dev up --ha: a new master took writes {took:.1f} s after the kill")
        # the dev supervisor restarts the lost tree; it rejoins as a slave of the new master
        dev.reader.wait_for_prefix(f"[supervisor] broker-{first.master_id} is back", timeout=120)
        wait_for(
            lambda: first.master_id in group_state(controller).sync_state_set,
            60,
            "the old master back in the in-sync set",
        )
        # getBrokerEpoch: each replica's epoch file; the new master's holds both epochs
        shown = subprocess.run(
            [FERRY, "admin", "getBrokerEpoch", "-n", namesrv, "-b", "broker-a", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        files = {r["broker_id"]: [e[0] for e in r["epochs"]] for r in json.loads(shown.stdout)}
        assert files[second.master_id] == [1, 2], files
        dev.proc.send_signal(signal.SIGTERM)
        assert dev.proc.wait(120) == 0
    finally:
        dev.close()
