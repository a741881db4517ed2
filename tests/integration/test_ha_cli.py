"""`ferry dev up --slave` and `ferry serve ha-replicator`, as people run them."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from ha_support import broker_ids
from itest_support import FERRY, DevUp, wait_for

# two broker groups start per test: on a loaded 2-core machine that alone can take a minute
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_dev_up_slave_adds_a_slave_group_to_the_route(tmp_path: Path) -> None:
    dev = DevUp(tmp_path / "data", "--slave", timeout=240)  # two broker groups
    try:
        wait_for(lambda: broker_ids(dev.fields["namesrv"]) == {0, 1}, 60, "master and slave routed")
        assert (tmp_path / "data" / "broker-a-s" / "commitlog").is_dir()
        # the slave group's services are told apart from the master's in the output
        said = dev.reader.lines
        assert any(ln.startswith("[broker-store] listening ") for ln in said)
        assert any(ln.startswith("[broker-store-slave] listening ") for ln in said)
        assert [ln for ln in said if "READY" in ln] == [said[-1]]  # the cluster's, last
        dev.proc.send_signal(signal.SIGTERM)
        assert dev.proc.wait(120) == 0
    finally:
        dev.close()


def test_serve_ha_replicator_runs_the_service_and_checks_its_keys(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            FERRY,
            "serve",
            "ha-replicator",
            "--set",
            f"storePathRootDir={tmp_path}",
            "--set",
            "storeEndpoint=tcp://127.0.0.1:1",
            "--set",
            "brokerRole=SLAVE",
            "--set",
            "brokerId=1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "haMasterAddress" in done.stderr
