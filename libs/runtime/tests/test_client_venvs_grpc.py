"""client_venvs.rocketmq_grpc_python: the venv of RocketMQ 5's gRPC client holds the pinned
rocketmq-python-client, whose bundled generated modules (the MessagingService servicer and
stub) and client classes import there. The first run builds the venv under <repo>/.ferry/venvs
from the package index (about 20 s), the one the proxy's tests use; later runs reuse it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ferry.runtime.testing.client_venvs import (
    ROCKETMQ_GRPC_CLIENT,
    main,
    rocketmq_grpc_python,
    rocketmq_remoting_python,
)

# Run with the venv's python: what a proxy test needs from the client, as one JSON line.
_INSPECT = r"""
import importlib.metadata, json, sys
from rocketmq import Producer, PushConsumer, SimpleConsumer
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc
service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
print(json.dumps({
    "version": importlib.metadata.version("rocketmq-python-client"),
    "service": service.full_name,
    "methods": sorted(m.name for m in service.methods),
    "servicer": service_pb2_grpc.MessagingServiceServicer.__name__,
    "prefix": sys.prefix,
}))
"""


@pytest.mark.timeout(600)
def test_grpc_client_venv_holds_the_pinned_client_and_its_generated_service(
    tmp_path: Path,
) -> None:
    python = rocketmq_grpc_python()
    # the client makes ~/logs/rocketmq_python/ when imported: keep that out of the real home
    done = subprocess.run(
        [str(python), "-W", "error", "-c", _INSPECT],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["version"] == ROCKETMQ_GRPC_CLIENT.split("==")[1]
    assert seen["service"] == "apache.rocketmq.v2.MessagingService"
    assert {
        "QueryRoute",
        "Heartbeat",
        "Telemetry",
        "SendMessage",
        "QueryAssignment",
        "ReceiveMessage",
        "AckMessage",
        "ChangeInvisibleDuration",
        "ForwardMessageToDeadLetterQueue",
        "EndTransaction",
        "NotifyClientTermination",
    } <= set(seen["methods"])
    assert seen["servicer"] == "MessagingServiceServicer"
    assert Path(seen["prefix"]) == python.parent.parent


def test_the_two_rocketmq_clients_get_venvs_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # both install the top-level package `rocketmq`: one venv holding both would break one
    calls: list[tuple[str, list[str]]] = []

    def record(name: str, requirements: list[str], *, root: Path | None = None) -> Path:
        calls.append((name, requirements))
        return tmp_path / name / "bin" / "python"

    monkeypatch.setattr("ferry.runtime.testing.client_venvs.client_venv_python", record)
    grpc_python = rocketmq_grpc_python()
    remoting_python = rocketmq_remoting_python()
    assert grpc_python != remoting_python
    assert calls == [
        ("rocketmq-python-client-5.1.2", ["rocketmq-python-client==5.1.2"]),
        ("rocketmq-0.4.4", ["rocketmq==0.4.4"]),
    ]


def test_main_refuses_an_unknown_venv_name() -> None:
    with pytest.raises(SystemExit, match="unknown client venv"):
        main(["grcp"])
