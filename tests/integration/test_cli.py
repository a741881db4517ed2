"""The `ferry` command as people use it: dev up, admin, serve."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from itest_support import FERRY, DevUp, LineReader, alive, children_of, wait_for

MQADMIN = str(Path(sys.executable).parent / "mqadmin")


@pytest.fixture
def dev_up(tmp_path: Path) -> Iterator[DevUp]:
    dev = DevUp(tmp_path / "data")
    yield dev
    dev.close()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60, check=False)


def test_dev_up_prints_ready_then_admin_commands_work(dev_up: DevUp) -> None:
    ns = dev_up.fields["namesrv"]
    assert ns.startswith("127.0.0.1:")
    console = dev_up.fields["console"]
    assert console.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(console + "/", timeout=30) as page:
        assert "broker-a" in page.read().decode()
    made = run(FERRY, "admin", "updateTopic", "-n", ns, "-t", "CliTopic", "-r", "3", "-w", "3")
    assert made.returncode == 0, made.stderr
    assert "CliTopic" in made.stdout

    def listed() -> bool:
        out = run(FERRY, "admin", "topicList", "-n", ns, "--json")
        return out.returncode == 0 and "CliTopic" in json.loads(out.stdout)

    wait_for(listed, timeout=15, what="CliTopic in topicList")
    route = run(MQADMIN, "TOPICROUTE", "-n", ns, "-t", "CliTopic", "--json")  # any case
    assert route.returncode == 0, route.stderr
    assert json.loads(route.stdout)["queue_datas"][0]["write_queue_nums"] == 3
    clusters = run(FERRY, "admin", "clusterlist", "-n", ns)
    assert clusters.returncode == 0, clusters.stderr
    assert "broker-a" in clusters.stdout
    assert "DefaultCluster" in clusters.stdout
    missing = run(FERRY, "admin", "topicRoute", "-n", ns, "-t", "NoSuchTopic")
    assert missing.returncode == 3  # not found
    assert "TOPIC_NOT_EXIST" in missing.stderr


def test_dev_up_stops_cleanly_on_sigterm_leaving_no_processes(dev_up: DevUp) -> None:
    kids = children_of(dev_up.proc.pid)
    assert len(kids) >= 3  # namesrv, broker-store, broker-remoting
    dev_up.proc.send_signal(signal.SIGTERM)
    assert dev_up.proc.wait(30) == 0
    wait_for(lambda: not any(alive(k) for k in kids), timeout=15, what="children to exit")


def test_services_exit_when_dev_up_is_killed(dev_up: DevUp) -> None:
    kids = children_of(dev_up.proc.pid)
    dev_up.proc.kill()
    dev_up.proc.wait(10)
    wait_for(
        lambda: not any(alive(k) for k in kids),
        timeout=15,
        what="orphaned services to notice their parent is gone",
    )


def test_serve_broker_accepts_a_rocketmq_broker_conf(tmp_path: Path) -> None:
    conf = Path(__file__).parents[2] / "libs" / "runtime" / "tests" / "seed_broker.conf"
    proc = subprocess.Popen(
        [
            FERRY,
            "serve",
            "broker",
            "-c",
            str(conf),
            "--set",
            "listenPort=0",
            "--set",
            f"storePathRootDir={tmp_path}",
            "--set",
            "namesrvAddr=127.0.0.1:1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    reader = LineReader(proc.stdout)
    try:
        ready = reader.wait_for_prefix("READY broker ")
        assert "addr=192.168.29.18:" in ready  # brokerIP1 is what clients are told
        assert any("pullMessageThreadPoolNums" in ln for ln in reader.lines)  # reported
        # the broker group's one READY line is serve's own; its services' are relayed
        assert [ln for ln in reader.lines if "READY" in ln] == [ready]
        assert any(ln.startswith("[broker-remoting] listening addr=") for ln in reader.lines)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        reader.close()


def test_dev_up_output_has_one_ready_line_and_whole_prefixed_service_lines(
    tmp_path: Path,
) -> None:
    """`ferry dev up | grep READY` finds exactly the cluster's line; each service's own
    READY is relayed as `[service] listening …`, and no two lines are merged."""
    dev = DevUp(tmp_path / "data")
    try:
        assert dev.reader.lines[-1].startswith("READY namesrv=")
        dev.proc.send_signal(signal.SIGTERM)
        dev.reader.wait_for_prefix("ferry dev: stopped", timeout=60)  # its last line
        assert dev.proc.wait(30) == 0
    finally:
        dev.close()
    lines = [ln for ln in dev.reader.lines if ln]
    ready = [ln for ln in lines if "READY" in ln]
    assert len(ready) == 1, ready
    services = ("namesrv", "console", "broker-store", "index", "scheduler", "checkback")
    services = (*services, "ha-replicator", "proxy")
    prefixes = tuple(f"[{name}] " for name in (*services, "broker-remoting"))
    own = ("READY namesrv=", "ferry dev: stopped")
    strays = [ln for ln in lines if not ln.startswith(prefixes + own)]
    assert not strays, strays
    listening = {ln.split("]", 1)[0][1:] for ln in lines if "] listening " in ln}
    assert listening == {*services, "broker-remoting"}


# what the proxy is asked: RocketMQ 5's QueryRoute with the generated stub, in the client's venv
PROXY_PROBE = r"""
import sys
import grpc
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s, service_pb2_grpc
stub = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(sys.argv[1]))
got = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="NoSuchTopic")), timeout=10)
print(got.status.code)
"""


def test_dev_up_starts_the_grpc_proxy_on_its_name_server(tmp_path: Path) -> None:
    """By default (DevUp gives --proxy-port 0, as it gives every port), with the brokers'
    metrics exporter: its own /metrics on a free port, as the broker's is."""
    from ferry.runtime.testing.client_venvs import rocketmq_grpc_python

    python = rocketmq_grpc_python()
    prom = ("--set", "metricsExporterType=PROM", "--set", "metricsPromExporterPort=0")
    dev = DevUp(tmp_path / "data", *prom)
    try:
        proxy = dev.fields["proxy"]
        assert proxy.rsplit(":", 1)[1].isdigit(), dev.fields
        (tmp_path / "home").mkdir()  # the client package writes its log under ~/logs
        probe = subprocess.run(
            [str(python), "-c", PROXY_PROBE, proxy],
            capture_output=True,
            text=True,
            timeout=60,
            env={"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"},
            check=False,
        )
        listening = next(ln for ln in dev.reader.lines if ln.startswith("[proxy] listening "))
        metrics = dict(p.split("=", 1) for p in listening.split()[2:])["metrics"]
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as page:
            scraped = page.read().decode()
    finally:
        dev.close()
    # the proxy asked this cluster's name server: the topic is unknown there
    assert probe.stdout.split() == ["40402"], probe.stdout + probe.stderr  # TOPIC_NOT_FOUND
    counted = 'request_code="QueryRoute",response_code="TOPIC_NOT_FOUND"} 1.0'
    assert counted in scraped, scraped[-2000:]
