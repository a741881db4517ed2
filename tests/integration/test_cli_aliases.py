"""RocketMQ habits through the real entry points: `mqnamesrv`, `mqbroker -c broker.conf` with
the broker.conf of seed 000 exactly as users bring it (brokerIP1 set), and `mqadmin` with
mqadmin's spelling of command names and `-n localhost:port`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from itest_support import LineReader

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
SEED_CONF = Path(__file__).parent / "data" / "seed000_broker.conf"


class Foreground:
    """A command in the foreground, stopped with SIGTERM like Ctrl-C."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self.proc.stdout is not None
        self.reader = LineReader(self.proc.stdout)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            self.reader.close()


@pytest.fixture
def namesrv() -> Iterator[str]:
    ns = Foreground(str(BIN / "mqnamesrv"), "--set", "listenPort=0")
    try:
        ready = ns.reader.wait_for_prefix("READY namesrv ")
        yield ready.split("addr=", 1)[1].split()[0]
    finally:
        assert ns.stop() == 0


def test_mqbroker_starts_from_the_seed_broker_conf_as_users_bring_it(
    namesrv: str, tmp_path: Path
) -> None:
    assert "brokerIP1=192.168.29.18" in SEED_CONF.read_text(encoding="utf-8")
    broker = Foreground(
        str(BIN / "mqbroker"),
        "-c",
        str(SEED_CONF),
        # only what must be free or temporary: the seed's port 10911 and the store path
        "--set",
        "listenPort=0",
        "--set",
        f"storePathRootDir={tmp_path}",
        "--set",
        f"namesrvAddr={namesrv}",
    )
    try:
        ready = broker.reader.wait_for_prefix("READY broker ")
        addr = ready.split("addr=", 1)[1].split()[0]
        assert addr.startswith("192.168.29.18:")  # brokerIP1 is what clients are told
        port = namesrv.rsplit(":", 1)[1]
        listed = subprocess.run(
            [str(BIN / "mqadmin"), "ClusterList", "-n", f"localhost:{port}", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
        brokers = json.loads(listed.stdout)["brokers"]
        assert brokers["broker-a"]["broker_addrs"] == {"0": addr}
        # the seed's keys are in force (asked on the port it listens on, as brokerIP1 is
        # this test's make-believe address)
        local = "127.0.0.1:" + addr.rsplit(":", 1)[1]
        got = subprocess.run(
            [str(BIN / "mqadmin"), "getbrokerconfig", "-n", namesrv, "-b", local, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert got.returncode == 0, got.stderr
        config = json.loads(got.stdout)[local]
        assert config["maxMessageSize"] == "65536"
        assert config["mappedFileSizeConsumeQueue"] == "300000"  # from mapedFileSize…
        assert config["mappedFileSizeCommitLog"] == str(1024**3)
        assert config["fileReservedTime"] == "120"
        assert config["brokerIP1"] == "192.168.29.18"
    finally:
        assert broker.stop() == 0
