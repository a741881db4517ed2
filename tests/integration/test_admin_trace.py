"""mqadmin queryMsgTraceById through a pipe: `ferry dev up` (its services export spans to
its console), a message sent, and its path read back from the console by message id; and
DecodeMessageId."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from itest_support import FERRY, DevUp, wait_for

from ferry.client import Message, Producer
from ferry.client.msg_id import MessageIdGenerator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC = "TraceTopic_" + "of_the_north_warehouse_" * 3
REMOTING, STORE = "ferry-broker-remoting", "ferry-broker-store"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevUp]:
    up = DevUp(tmp_path_factory.mktemp("dev") / "data")
    try:
        yield up
    finally:
        up.close()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FERRY, "admin", "queryMsgTraceById", *args],
        capture_output=True,  # stdout a pipe
        text=True,
        timeout=60,
        check=False,
    )


def test_query_msg_trace_by_id_prints_the_message_path(dev: DevUp, tmp_path: Path) -> None:
    namesrv, console = dev.fields["namesrv"], dev.fields["console"]
    with Producer("TraceCliProducer", namesrv) as producer:
        msg_id = producer.send(Message(TOPIC, b"traced")).msg_id

    def stored() -> dict[str, object] | None:
        done = run("-i", msg_id, "--console", console, "--json")
        if done.returncode != 0:
            return None
        found = json.loads(done.stdout)
        kinds = {(s["service"], s["name"]) for s in found["spans"]}
        return found if {(REMOTING, f"send {TOPIC}"), (STORE, "store append")} <= kinds else None

    found = wait_for(stored, 60, f"the console's spans of {msg_id}")
    assert found is not None and found["msg_id"] == msg_id
    out = run("-i", msg_id, "--console", console)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(msg_id in ln and console in ln for ln in lines)  # the title: it, and where
    send = [ln.split() for ln in lines if REMOTING in ln.split() and TOPIC in ln.split()]
    assert send and send[0][0] in found["traces"]  # the trace id, whole
    # the console from the environment, as NAMESRV_ADDR is for the rest
    env = {"FERRY_CONSOLE": console, "PATH": str(Path(FERRY).parent)}
    by_env = subprocess.run(
        [FERRY, "admin", "queryMsgTraceById", "-i", msg_id],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert by_env.returncode == 0 and msg_id in by_env.stdout
    unknown = run("-i", "0A0000000000000000000000NOSUCH", "--console", console)
    assert unknown.returncode == 3 and "0A0000000000000000000000NOSUCH" in unknown.stderr
    nobody = run("-i", msg_id, "--console", "http://127.0.0.1:1")
    assert nobody.returncode == 3 and "http://127.0.0.1:1" in nobody.stderr
    assert run("-i", msg_id, "--console", "file:///etc/passwd").returncode == 2
    assert run("--console", console).returncode == 2  # -i is required


def test_decode_message_id_gives_client_address_pid_and_time() -> None:
    gen = MessageIdGenerator(ip="10.1.2.3", pid=4242)
    before = int(time.time() * 1000)
    first, second = gen.next_id(), gen.next_id()
    after = int(time.time() * 1000)
    done = subprocess.run(
        [FERRY, "admin", "DecodeMessageId", "-i", f"{first},{second}", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert [(g["msg_id"], g["client_ip"], g["pid"]) for g in got] == [
        (first, "10.1.2.3", 4242),
        (second, "10.1.2.3", 4242),
    ]
    assert all(before <= g["sent_ms"] <= after for g in got)
    table = subprocess.run(
        [FERRY, "admin", "decodemessageid", "-i", first],  # names ignore case
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert table.returncode == 0 and any(
        first in ln.split() and "10.1.2.3" in ln.split() for ln in table.stdout.splitlines()
    )
    for bad in ("XYZ", "00", ","):
        refused = subprocess.run(
            [FERRY, "admin", "DecodeMessageId", "-i", bad],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert refused.returncode == 2, (bad, refused.stderr)


def test_a_server_that_is_not_a_ferry_console_is_named_as_such() -> None:
    """Whatever else listens where the console was looked for (8080 by default) answers with
    something that holds no spans: the command says which server it asked and that it is
    not a console, rather than "no trace"."""
    import http.server
    import threading

    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"status": "ok", "service": "something else"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        where = f"http://127.0.0.1:{server.server_address[1]}"
        done = run("-i", "0A0000000000000000000000000000", "--console", where)
        assert done.returncode == 1, done.stderr
        assert where in done.stderr and "not a Ferry console" in done.stderr
    finally:
        server.shutdown()
        server.server_close()
