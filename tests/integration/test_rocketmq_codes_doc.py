"""docs/operations.md's table of the request codes the RocketMQ doors serve is what they serve:
a local cluster with both doors open is asked every RocketMQ request code (those below 10000
in ferry.protocol.codes.RequestCode, with empty headers); a code is served when the answer is
anything but REQUEST_CODE_NOT_SUPPORTED (3)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.namesrv import door as namesrv_door
from ferry.protocol.codes import RequestCode
from ferry.protocol.rocketmq.codes import ResponseCode
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.remoting_client import RemotingClient

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SECTION = "## RocketMQ's remoting protocol (the door)"
DOORS = {"name server": "namesrv", "broker": "broker"}
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*([A-Z0-9_]+)\s*\|\s*([a-z ]+?)\s*\|\s*$")


def documented() -> dict[str, dict[int, str]]:
    """door -> {code: name} from the section's table."""
    text = DOC.read_text()
    assert SECTION in text, f"{DOC} has no section {SECTION!r}"
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    out: dict[str, dict[int, str]] = {d: {} for d in DOORS.values()}
    for line in body.splitlines():
        m = ROW.match(line)
        if m:
            code, name, door = int(m.group(1)), m.group(2), m.group(3)
            assert door in DOORS, f"unknown door {door!r} in {line!r}"
            out[DOORS[door]][code] = name
    assert "REQUEST_CODE_NOT_SUPPORTED (3)" in body
    return out


def rocketmq_codes() -> list[int]:
    return sorted({int(c) for c in RequestCode if c < 10000})


def served(addr: str) -> set[int]:
    out = set()
    with RemotingClient(addr) as client:
        for code in rocketmq_codes():
            resp = client.call(code, {}, b"")
            if resp.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                out.add(code)
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_local_cluster(str(tmp_path_factory.mktemp("codes-doc")), rocketmq_port=0)
    try:
        yield local
    finally:
        local.stop()


def test_the_docs_table_names_each_code_as_ferry_does() -> None:
    for door, codes in documented().items():
        for code, name in codes.items():
            assert RequestCode(code).name == name, (door, code, name)


def test_the_name_servers_door_serves_what_the_doc_lists(cluster: LocalCluster) -> None:
    listed = set(documented()["namesrv"])
    assert set(namesrv_door.routes()) == listed  # the route table, built in-process
    assert served(cluster.rocketmq_addr) == listed


def test_the_brokers_door_serves_what_the_doc_lists(cluster: LocalCluster) -> None:
    listed = set(documented()["broker"])
    assert served(cluster.broker_rocketmq_addr) == listed
    # and the broker is still there after every code
    with RemotingClient(cluster.broker_rocketmq_addr) as client:
        assert client.call(RequestCode.GET_BROKER_RUNTIME_INFO).code == ResponseCode.SUCCESS
