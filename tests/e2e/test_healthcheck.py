"""deploy/healthcheck.py, the containers' health probe, against services run as local processes
(no Docker needed): what it calls healthy and what not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from itest_support import Cluster, start_cluster
from security_support import SECURITY, generate_keys

from ferry.runtime.etcd import start_etcd
from ferry.runtime.launcher import start_controller

PROBE = Path(__file__).resolve().parents[2] / "deploy" / "healthcheck.py"


def probe(
    service: str, addr: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return probe_url(service, f"tcp://{addr}", env)


def probe_url(
    service: str, endpoint: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PROBE), service, endpoint],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
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


def test_probe_passes_for_etcd_and_the_controller_and_fails_once_etcd_is_gone(
    tmp_path: Path,
) -> None:
    """The `ha` profile's etcd and controller containers use the same probe."""
    etcd = start_etcd(tmp_path / "etcd")
    controller = None
    try:
        controller = start_controller(etcd.endpoint, 3000)
        health_url = f"{etcd.endpoint}/health"
        done = probe_url("etcd", health_url)
        assert (done.returncode, done.stdout.strip()) == (0, "healthy")
        assert probe("controller", controller.endpoints["addr"]).returncode == 0
        etcd.kill()
        gone = probe_url("etcd", health_url)
        assert gone.returncode == 1
        assert health_url in gone.stdout
    finally:
        if controller is not None:
            controller.stop()
        etcd.stop()


def test_probe_signs_and_encrypts_with_the_containers_security_variables(tmp_path: Path) -> None:
    """The `secure` profile: the probe takes the service's FERRY_<key> security variables and
    passes for the client ports (name server, remoting) and an internal one (the store), all
    with authentication, authorization and CURVE on; without them it is refused."""
    keys = tmp_path / "keys"
    secure = {**SECURITY, **generate_keys(keys)}
    cluster = start_cluster(tmp_path / "data", overrides=secure)
    try:
        plain = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
        container = {**plain, **{f"FERRY_{key}": value for key, value in secure.items()}}
        store = cluster.local.store_endpoint.removeprefix("tcp://")
        for service, addr in (
            ("namesrv", cluster.namesrv),
            ("broker-store", store),
            ("broker-remoting", cluster.broker_addr),
        ):
            done = probe(service, addr, container)
            assert (done.returncode, done.stdout.strip()) == (0, "healthy"), (service, done)

        # no security variables: unsigned and in clear, so no answer within the probe's wait
        assert probe("namesrv", cluster.namesrv, plain).returncode == 1
        # signed but without CURVE: the same
        unencrypted = {k: v for k, v in container.items() if not k.startswith("FERRY_tls")}
        assert probe("namesrv", cluster.namesrv, unencrypted).returncode == 1
        # a bad setting is said, not a traceback
        broken = {**container, "FERRY_tlsInternalKeyFile": str(tmp_path / "missing")}
        done = probe("namesrv", cluster.namesrv, broken)
        assert done.returncode == 1
        assert "ConfigError" in done.stdout and "CURVE key file" in done.stdout
    finally:
        cluster.local.stop()
