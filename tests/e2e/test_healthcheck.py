"""deploy/healthcheck.py, the containers' health probe, against services run as local processes
(no Docker needed): what it calls healthy and what not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from itest_support import Cluster

PROBE = Path(__file__).resolve().parents[2] / "deploy" / "healthcheck.py"


def probe(service: str, addr: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PROBE), service, f"tcp://{addr}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_probe_passes_for_serving_services_and_fails_when_the_store_is_gone(
    local_cluster: Cluster,
) -> None:
    cluster = local_cluster
    store_endpoint = cluster.local.store_endpoint.removeprefix("tcp://")
    for service, addr in (
        ("namesrv", cluster.namesrv),
        ("broker-store", store_endpoint),
        ("broker-remoting", cluster.broker_addr),
    ):
        done = probe(service, addr)
        assert (done.returncode, done.stdout.strip()) == (0, "healthy"), service

    wrong = probe("broker-store", cluster.namesrv)
    assert wrong.returncode == 1
    assert "is namesrv, not broker-store" in wrong.stdout

    cluster.local.get("broker-store").kill()
    orphan = probe("broker-remoting", cluster.broker_addr)
    assert orphan.returncode == 1
    assert "its store does not" in orphan.stdout
