"""With tlsEnable, nothing crosses the wire in clear (issue 27): tcpdump (Debian's, started by
the test) captures loopback while a master and its slave run with CURVE on every socket and a
client sends and consumes; the capture holds neither the message body nor any secret.

A marker sent in clear over a plain TCP connection during the same capture proves the capture
sees loopback traffic at all (else the test would pass by capturing nothing).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from itest_support import SMALL_STORE, wait_for
from security_support import INNER, ROOT, SECURITY, generate_keys

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, Producer, PullConsumer, SendStatus
from ferry.runtime.launcher import LocalCluster, start_local_cluster

BODY = b"ferry-body-that-must-not-be-seen-7f3a9c"
CLEAR_MARKER = b"ferry-capture-control-marker-51e0"


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    return tmp_path / "keys"


@pytest.fixture
def tls_cluster(tmp_path: Path, keys: Path) -> Iterator[LocalCluster]:
    overrides = {
        **SMALL_STORE,
        **SECURITY,
        **generate_keys(keys),
        "brokerRole": "SYNC_MASTER",
    }
    cluster = start_local_cluster(str(tmp_path / "data"), overrides=overrides, slave=True)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def control() -> Iterator[socket.socket]:
    """A plain TCP server for the capture's control marker, bound before the capture starts."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


@pytest.fixture
def capture(tmp_path: Path, tls_cluster: LocalCluster, control: socket.socket) -> Iterator[Path]:
    """tcpdump on loopback, filtered to the cluster's ports and the control server's (other
    tests' traffic on a busy machine would make it drop packets)."""
    if shutil.which("tcpdump") is None:
        pytest.fail("tcpdump is not installed (make deps installs it)")
    ports = {control.getsockname()[1]}
    for sp in tls_cluster.processes:
        for value in sp.endpoints.values():
            tail = value.rpartition(":")[2]
            if value.startswith(("tcp://", "127.0.0.1:")) and tail.isdigit():
                ports.add(int(tail))
    bpf = "tcp and (" + " or ".join(f"port {p}" for p in sorted(ports)) + ")"
    pcap = tmp_path / "loopback.pcap"
    log = (tmp_path / "tcpdump.log").open("wb")
    command = ["tcpdump", "-i", "lo", "--immediate-mode", "-B", "8192", "-U", "-s", "0"]
    proc = subprocess.Popen([*command, "-w", str(pcap), bpf], stdout=subprocess.DEVNULL, stderr=log)
    try:
        # tcpdump writes the pcap header once it listens
        wait_for(lambda: pcap.exists() and pcap.stat().st_size > 0, 10, "tcpdump to listen")
        yield pcap
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        log.close()
        print((tmp_path / "tcpdump.log").read_text())


def _send_in_clear(server: socket.socket, marker: bytes) -> None:
    with socket.create_connection(server.getsockname()) as client:
        peer, _ = server.accept()
        with peer:
            client.sendall(marker)
            assert peer.recv(len(marker)) == marker


def test_nothing_crosses_loopback_in_clear(
    tls_cluster: LocalCluster, keys: Path, control: socket.socket, capture: Path
) -> None:
    server_key = str(keys / "server.key")
    namesrv = tls_cluster.namesrv_addr
    with Admin(namesrv, credentials=ROOT, tls_server_key=server_key) as admin:
        admin.create_topic("Secret", 2, 2, broker_addr=tls_cluster.broker_addr)
    with Producer("pg", namesrv, credentials=ROOT, tls_server_key=server_key) as producer:
        sent = producer.send(Message("Secret", BODY, keys="k1"))
    with PullConsumer(
        "g", namesrv, ConsumeFromWhere.FIRST_OFFSET, credentials=ROOT, tls_server_key=server_key
    ) as consumer:
        consumer.subscribe("Secret")
        got: list[bytes] = []
        wait_for(lambda: got.extend(m.body for m in consumer.poll(0.5)) or BODY in got, 20, "it")
    # SYNC_MASTER: SEND_OK means the slave acked it, so it crossed master to slave
    assert sent.status is SendStatus.SEND_OK
    _send_in_clear(control, CLEAR_MARKER)
    time.sleep(0.5)  # wait-ok: tcpdump -U flushes per packet; let the last ones land
    data = capture.read_bytes()
    assert CLEAR_MARKER in data, "the capture saw no loopback traffic"
    secrets = {
        "message body": BODY,
        "root's secret key": ROOT.secret_key.encode(),
        "the inner secret key": INNER.secret_key.encode(),
        "the server's secret key": _secret_of(keys / "server.key_secret"),
        "the internal secret key": _secret_of(keys / "internal.key_secret"),
    }
    seen = [name for name, value in secrets.items() if value in data]
    assert seen == []
    assert os.path.getsize(capture) > 10_000  # the cluster's own traffic was captured


def _secret_of(path: Path) -> bytes:
    for line in path.read_text().splitlines():
        if "secret-key" in line:
            return line.split("=", 1)[1].strip().strip('"').encode()
    raise AssertionError(f"no secret key in {path}")
