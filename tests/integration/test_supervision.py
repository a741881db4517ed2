"""Supervision (issue 25.1): `ferry serve broker` restarts a service killed with -9 while
the rest keep serving, gives up on one that keeps crashing, and a SIGTERM still stops the
whole tree."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from consume_support import create_topic
from ha_support import broker_ids, status
from itest_support import FERRY, DevUp, LineReader, RawClient, alive, children_of, wait_for
from supervision_support import FAST_POLICY, MODULES, ServedBroker, child_running

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    FerryError,
    Message,
    Producer,
    PullConsumer,
    SendStatus,
)
from ferry.protocol import record
from ferry.protocol.codes import PullStatus, ResponseCode
from ferry.protocol.messages import (
    ClusterInfoReply,
    ErrorReply,
    GetClusterInfoRequest,
    PullMessageReply,
    PullMessageRequest,
    StorePutReply,
    StorePutRequest,
)
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.launcher import LocalCluster, ServiceProcess, service_args, start_service
from ferry.runtime.supervisor import RestartPolicy, Supervisor

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def namesrv() -> Iterator[str]:
    sp: ServiceProcess = start_service("namesrv", service_args(None, {"listenPort": "0"}))
    try:
        yield sp.endpoints["addr"]
    finally:
        sp.stop()


def send_ok(producer: Producer, topic: str, body: bytes) -> bool:
    try:
        return producer.send(Message(topic, body)).status == SendStatus.SEND_OK
    except FerryError:
        return False


def test_killed_services_are_restarted_alone_and_sends_succeed_again(
    tmp_path: Path, namesrv: str
) -> None:
    """kill -9 of the store, then remoting, then the index of one `ferry serve broker`: each
    is restarted alone, on the endpoint it had (its peers reconnect there), and a running
    producer's sends succeed again."""
    broker = ServedBroker(tmp_path / "broker", namesrv)
    try:
        create_topic(namesrv, "Supervised", 4)
        with Producer("pg-supervised", namesrv, send_timeout_ms=2000) as producer:
            assert all(send_ok(producer, "Supervised", b"before") for _ in range(10))
            for service in ("broker-store", "broker-remoting", "index"):
                endpoint = broker.endpoint_of(service)
                others = {name: broker.pid_of(name) for name in MODULES if name != service}
                old = broker.kill9(service)
                new = broker.wait_restarted(service, old)
                assert broker.reader.lines[-1] == f"[supervisor] {service} is back (pid {new})"
                assert broker.endpoint_of(service) == endpoint  # relayed `listening` again
                wait_for(lambda: send_ok(producer, "Supervised", b"again"), 30, "a send")
                assert all(send_ok(producer, "Supervised", b"after") for _ in range(10))
                # nothing else was restarted
                assert {name: broker.pid_of(name) for name in others} == others
        assert broker.proc.poll() is None
        assert broker.stop() == 0
    finally:
        broker.close()


def test_sends_ride_out_a_restart_of_remoting_on_a_single_broker(
    tmp_path: Path, namesrv: str
) -> None:
    """kill -9 of the only broker's remoting under a producer with the default timeout
    (3 s): sync sends and send_async wait for the restarted remoting instead of failing at
    once with ConnectionFailedError, so none raises (issue 42 §4)."""
    broker = ServedBroker(tmp_path / "broker", namesrv)
    try:
        create_topic(namesrv, "RideOut", 4)
        with Producer("pg-ride-out", namesrv) as producer:
            assert producer.send_timeout_s == 3.0
            assert all(send_ok(producer, "RideOut", b"before") for _ in range(5))
            errors: list[BaseException] = []
            sent: list[str] = []
            stop = threading.Event()

            def keep_sending() -> None:
                i = 0
                while not stop.is_set():
                    try:
                        producer.send(Message("RideOut", f"sync {i}".encode()))
                        fut = producer.send_async(Message("RideOut", f"async {i}".encode()))
                        fut.result(timeout=10)
                        sent.append(f"{i}")
                    except Exception as exc:  # noqa: BLE001 - what the test counts
                        errors.append(exc)
                    i += 1

            worker = threading.Thread(target=keep_sending, name="ride-out")
            worker.start()
            try:
                wait_for(lambda: len(sent) >= 20, 30, "sends before the kill")
                old = broker.kill9("broker-remoting")
                broker.wait_restarted("broker-remoting", old)
                before = len(sent)
                wait_for(lambda: len(sent) >= before + 20, 30, "sends after the restart")
            finally:
                stop.set()
                worker.join(timeout=30)
        assert errors == [], f"{len(errors)} sends raised: {errors[:3]}"
    finally:
        broker.close()


def test_no_acknowledged_message_is_lost_when_the_store_is_killed_mid_stream_3_times(
    tmp_path: Path, namesrv: str
) -> None:
    broker = ServedBroker(tmp_path / "broker", namesrv)
    acked: list[bytes] = []
    failed = 0
    stop = threading.Event()

    def produce(producer: Producer) -> None:
        nonlocal failed
        i = 0
        while not stop.is_set():
            body = f"m{i}".encode()
            i += 1
            if send_ok(producer, "NoLoss", body):
                acked.append(body)
            else:
                failed += 1

    try:
        create_topic(namesrv, "NoLoss", 2)
        with Producer("pg-noloss", namesrv, send_timeout_ms=2000) as producer:
            thread = threading.Thread(target=produce, args=(producer,), daemon=True)
            thread.start()
            wait_for(lambda: len(acked) >= 200, 60, "200 acknowledged sends")
            for _round in range(3):
                old = broker.kill9("broker-store")
                broker.wait_restarted("broker-store", old)
                at_restart = len(acked)
                wait_for(lambda n=at_restart: len(acked) >= n + 200, 60, "200 more acknowledged")
            stop.set()
            thread.join(30)
        want = set(acked)
        got: set[bytes] = set()
        consumer = PullConsumer("cg-noloss", namesrv, ConsumeFromWhere.FIRST_OFFSET)
        consumer.start()
        try:
            consumer.subscribe("NoLoss", "*")
            deadline = time.monotonic() + 60
            while not want <= got and time.monotonic() < deadline:
                got.update(m.body for m in consumer.poll(timeout=0.5))
        finally:
            consumer.shutdown()
        assert want - got == set(), f"{len(want - got)} acknowledged messages lost"
        assert len(want) == len(acked)  # each body once: the producer's own check
        print(f"acked {len(acked)}, failed during the restart {failed}")
        assert broker.stop() == 0
    finally:
        stop.set()
        broker.close()


def hold_port(endpoint: str) -> socket.socket:
    """Listens on endpoint's tcp port (as another program would), so that a service that
    must bind it fails at start."""
    port = int(endpoint.rsplit(":", 1)[1])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the old one's TIME_WAIT
    deadline = time.monotonic() + 5
    while True:
        try:
            sock.bind(("127.0.0.1", port))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)  # wait-ok: the killed process's socket is being closed
    sock.listen()
    return sock


def test_a_crash_loop_ends_in_one_give_up_line_and_the_rest_keep_serving(
    tmp_path: Path, namesrv: str
) -> None:
    """The store's port taken by someone else: each restart fails at bind; after 5 exits
    within the window the supervisor gives up on it, remoting keeps answering (a typed,
    retriable error) and the group stops cleanly."""
    policy = "first_wait=0.3,max_wait=0.6,max_crashes=5,window=60"
    broker = ServedBroker(tmp_path / "broker", namesrv, policy)
    held: socket.socket | None = None
    try:
        create_topic(namesrv, "Degraded", 2)
        remoting = broker.pid_of("broker-remoting")
        endpoint = broker.endpoint_of("broker-store")
        broker.kill9("broker-store")
        held = hold_port(endpoint)
        started = time.monotonic()
        line = broker.reader.wait_for_prefix("error: [supervisor] broker-store", timeout=60)
        gave_up_after = time.monotonic() - started
        assert "exited 5 times within 60 s" in line
        assert "not restarting it again, the other services keep serving" in line
        exits = [ln for ln in broker.reader.lines if ln.startswith("[supervisor] broker-store (")]
        assert len(exits) == 4, exits  # the fifth exit is the give-up line
        assert all("exit code" in ln for ln in exits[1:]), exits
        assert gave_up_after < 30
        # degraded, not down: remoting still answers, with an error a client may retry
        assert alive(remoting) and broker.proc.poll() is None
        with Producer("pg-degraded", namesrv, send_timeout_ms=15_000, retry_times=0) as p:
            began = time.monotonic()
            with pytest.raises(FerryError) as caught:
                p.send(Message("Degraded", b"x"))
            took = time.monotonic() - began
        assert caught.value.retriable, repr(caught.value)
        assert endpoint in str(caught.value)  # remoting's own answer: its store did not reply
        assert took < 16, took  # answered (remoting's store request timed out), not hung
        print(f"gave up after {gave_up_after:.1f} s; a send failed with {caught.value!r}")
        assert broker.stop() == 0
    finally:
        if held is not None:
            held.close()
        broker.close()


def test_sigterm_of_the_supervisor_leaves_no_process_behind(tmp_path: Path, namesrv: str) -> None:
    broker = ServedBroker(tmp_path / "broker", namesrv)
    try:
        old = broker.kill9("index")  # a restarted child must be stopped as well
        broker.wait_restarted("index", old)
        tree = children_of(broker.proc.pid)
        assert len(tree) == len(MODULES), tree
        assert broker.stop() == 0
        assert [pid for pid in tree if alive(pid)] == []
        # its services exited on the stop: none of them was restarted
        after = broker.reader.drain()
        assert not [ln for ln in after if ln.startswith("[supervisor]")], after
    finally:
        broker.close()


def test_restart_waits_double_to_the_cap_and_reset_once_the_service_has_served() -> None:
    """The Supervisor under `ferry serve` / `ferry dev up`, around a name server bound to
    port 0: each restart binds the port the first start got, and the waits go 0.1, 0.2,
    0.4, 0.4, then back to 0.1 once it has served for stable_after."""
    sp = start_service("namesrv", service_args(None, {"listenPort": "0"}))
    cluster = LocalCluster([sp])
    addr = sp.endpoints["addr"]
    said: list[str] = []
    policy = RestartPolicy(first_wait=0.1, max_wait=0.4, stable_after=1.5, window=60)
    policy = replace(policy, max_crashes=10)
    supervisor = Supervisor(cluster, policy=policy, say=said.append)
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop,), daemon=True)
    thread.start()

    def kill_and_wait_back() -> str:
        old = cluster.processes[0]
        os.kill(old.pid, signal.SIGKILL)
        wait_for(
            lambda: (
                cluster.processes[0].pid != old.pid
                and f"namesrv is back (pid {cluster.processes[0].pid})" in said[-1:]
            ),
            30,
            "the name server back",
        )
        assert cluster.processes[0].pid != old.pid
        assert cluster.processes[0].endpoints["addr"] == addr
        return next(ln for ln in said if f"(pid {old.pid}) exited" in ln)

    try:
        lines = [kill_and_wait_back() for _ in range(4)]
        waits = [ln.rsplit("restarting in ", 1)[1] for ln in lines]
        assert waits == ["0.1 s", "0.2 s", "0.4 s", "0.4 s"]
        assert all("exited with SIGKILL" in ln for ln in lines)
        time.sleep(1.6)  # wait-ok: the time it must serve for its wait to reset
        assert kill_and_wait_back().endswith("restarting in 0.1 s")
    finally:
        stop.set()
        thread.join(10)
        cluster.stop()
    assert not cluster.processes[0].alive()


def broker_addrs(namesrv: str) -> dict[int, str]:
    info = status(namesrv, GetClusterInfoRequest())
    assert isinstance(info, ClusterInfoReply), info
    return dict(info.brokers["broker-a"].broker_addrs)


def slave_bodies(slave_addr: str, topic: str, queues: int) -> list[bytes] | None:
    """Every message of `topic` as the slave's remoting serves it (a pull straight to it);
    None before the topic reached the slave."""
    out: list[bytes] = []
    client = RawClient(slave_addr)
    try:
        for qid in range(queues):
            body, frames = client.call(PullMessageRequest("cg-slave-read", topic, qid, 0, 256))
            if isinstance(body, ErrorReply) and body.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            assert isinstance(body, PullMessageReply), body
            if body.status == PullStatus.FOUND:
                out.extend(r.body for r in record.iter_records(bytes(frames[0])))
    finally:
        client.close()
    return sorted(out)


def test_dev_up_slave_survives_a_kill_of_the_masters_remoting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's report, run again: `ferry dev up --slave`, kill -9 the master's
    broker-remoting. The slave group, the name server and the console keep running, and the
    master's remoting comes back on its address. Then every process of the master group is
    killed at once: the slave still serves every message it had."""
    monkeypatch.setenv("FERRY_RESTART_POLICY", FAST_POLICY)
    # two broker groups; the topic reaches the slave within 0.3 s
    dev = DevUp(tmp_path / "data", "--slave", "--set", "slaveSynchronizeInterval=300", timeout=240)
    try:
        namesrv = dev.fields["namesrv"]
        wait_for(lambda: broker_ids(namesrv) == {0, 1}, 60, "master and slave routed")
        create_topic(namesrv, "AfterKill", 2)
        with Producer("pg-dev-before", namesrv) as producer:
            sent = [f"m-{i}".encode() for i in range(20)]
            for body in sent:
                assert producer.send(Message("AfterKill", body)).status == SendStatus.SEND_OK
        slave_addr = broker_addrs(namesrv)[1]
        wait_for(lambda: slave_bodies(slave_addr, "AfterKill", 2) == sorted(sent), 30, "the copy")
        root = dev.proc.pid
        remoting = child_running(root, "ferry.remoting", without="brokerRole=SLAVE")
        assert remoting is not None
        kept = {pid for pid in children_of(root) if pid != remoting}
        # namesrv, console, the gRPC proxy, the master's 5 others, the slave's 6
        assert len(kept) == 3 + (len(MODULES) - 1) + len(MODULES), kept
        os.kill(remoting, signal.SIGKILL)
        said = dev.reader.wait_for_prefix(f"[supervisor] broker-remoting (pid {remoting}) ")
        assert "exited with SIGKILL; restarting in 0.1 s" in said
        back = dev.reader.wait_for_prefix("[supervisor] broker-remoting is back", timeout=60)
        assert [pid for pid in kept if not alive(pid)] == []
        assert dev.proc.poll() is None
        new = child_running(root, "ferry.remoting", without="brokerRole=SLAVE")
        assert new is not None and new != remoting and f"(pid {new})" in back
        with Producer("pg-dev-kill", namesrv, send_timeout_ms=2000) as producer:
            wait_for(lambda: send_ok(producer, "AfterKill", b"x"), 30, "a send to the master")
        with urllib.request.urlopen(dev.fields["console"], timeout=10) as page:
            assert page.status == 200
        # the whole master group at once (a lost machine's processes): the slave reads on
        masters = [child_running(root, m, without="brokerRole=SLAVE") for m in MODULES.values()]
        for pid in masters:
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
        got = slave_bodies(slave_addr, "AfterKill", 2)
        assert got is not None and set(sent) <= set(got), got
        dev.proc.send_signal(signal.SIGTERM)
        assert dev.proc.wait(120) == 0
        assert [pid for pid in kept if alive(pid)] == []
    finally:
        dev.close()


def test_serve_one_service_restarts_it_on_its_port_and_exits_1_once_it_gave_up() -> None:
    """`ferry serve namesrv`: its READY line is the command's own (as when it was exec'd);
    a kill -9 is restarted on the same port; when the port is taken and every restart fails,
    the command, with nothing left to serve, exits 1."""
    env = {**os.environ, "FERRY_RESTART_POLICY": "first_wait=0.2,max_wait=0.4,window=60"}
    argv = [FERRY, "serve", "namesrv", "--set", "listenPort=0"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert proc.stdout is not None
    reader = LineReader(proc.stdout)
    held: socket.socket | None = None
    try:
        addr = reader.wait_for_prefix("READY namesrv addr=").split("addr=", 1)[1]
        first = child_running(proc.pid, "ferry.namesrv")
        assert first is not None
        os.kill(first, signal.SIGKILL)
        assert reader.wait_for_prefix("READY namesrv ") == f"READY namesrv addr={addr}"
        back = reader.wait_for_prefix("[supervisor] namesrv is back")
        second = child_running(proc.pid, "ferry.namesrv")
        assert second is not None and second != first and f"(pid {second})" in back
        os.kill(second, signal.SIGKILL)
        wait_for(lambda: not alive(second), 10, "the name server to die")
        held = hold_port(f"tcp://{addr}")
        line = reader.wait_for_prefix("error: [supervisor] namesrv exited 5 times", timeout=60)
        assert "not restarting it again" in line
        assert proc.wait(30) == 1
    finally:
        if held is not None:
            held.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        reader.close()


def test_ctrl_c_reaching_every_process_stops_all_and_restarts_none(
    tmp_path: Path, namesrv: str
) -> None:
    """Ctrl-C in a terminal sends SIGINT to the supervisor and to every service at once: the
    services' exits are the stop's, not crashes."""
    broker = ServedBroker(tmp_path / "broker", namesrv, FAST_POLICY, new_session=True)
    try:
        tree = children_of(broker.proc.pid)
        assert len(tree) == len(MODULES), tree
        os.killpg(broker.proc.pid, signal.SIGINT)
        assert broker.proc.wait(60) == 0
        assert [pid for pid in tree if alive(pid)] == []
        after = broker.reader.drain()
        assert not [ln for ln in after if " is back " in ln], after
    finally:
        broker.close()


def test_a_consumer_keeps_its_place_across_a_restart_of_remoting(
    tmp_path: Path, namesrv: str
) -> None:
    """A pull consumer halfway through a topic when remoting is killed -9 resumes where it
    was once remoting is back: every message once, none re-read."""
    broker = ServedBroker(tmp_path / "broker", namesrv)
    try:
        create_topic(namesrv, "KeepPlace", 2)
        with Producer("pg-keep-place", namesrv, send_timeout_ms=2000) as producer:
            first = [f"a{i}".encode() for i in range(300)]
            assert all(send_ok(producer, "KeepPlace", body) for body in first)
            consumer = PullConsumer("cg-keep-place", namesrv, ConsumeFromWhere.FIRST_OFFSET)
            consumer.start()
            try:
                consumer.subscribe("KeepPlace", "*")
                got: list[bytes] = []

                def read_some() -> bool:
                    got.extend(m.body for m in consumer.poll(0.5))
                    return len(got) >= 100

                wait_for(read_some, 30, "the first hundred")
                old = broker.kill9("broker-remoting")
                broker.wait_restarted("broker-remoting", old)
                second = [f"b{i}".encode() for i in range(300)]
                wait_for(lambda: send_ok(producer, "KeepPlace", second[0]), 30, "a send")
                assert all(send_ok(producer, "KeepPlace", body) for body in second[1:])
                want = set(first) | set(second)
                deadline = time.monotonic() + 60
                while not want <= set(got) and time.monotonic() < deadline:
                    got.extend(m.body for m in consumer.poll(0.5))
            finally:
                consumer.shutdown()
        assert want - set(got) == set()
        assert len(got) == len(want), f"{len(got) - len(want)} re-read"
        assert broker.stop() == 0
    finally:
        broker.close()


def test_with_restarts_off_serve_is_the_service_and_a_group_stops_at_the_first_exit() -> None:
    """FERRY_RESTART_POLICY=off, for a container whose orchestrator restarts it: `ferry serve
    namesrv` becomes the name server (no process above it), and a supervised group stops
    at the first exit with one line saying so."""
    env = {**os.environ, "FERRY_RESTART_POLICY": "off"}
    argv = [FERRY, "serve", "namesrv", "--set", "listenPort=0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().startswith("READY namesrv addr=")
        assert "ferry.namesrv" in Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
        assert children_of(proc.pid) == set()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
        proc.stdout.close()
    sp = start_service("namesrv", service_args(None, {"listenPort": "0"}))
    cluster = LocalCluster([sp])
    said: list[str] = []
    supervisor = Supervisor(cluster, policy=RestartPolicy(restart=False), say=said.append)
    os.kill(sp.pid, signal.SIGKILL)
    try:
        assert supervisor.run(threading.Event()) is False
    finally:
        cluster.stop()
    assert said == [
        f"error: namesrv (pid {sp.pid}) exited with SIGKILL; "
        "restarts are off (FERRY_RESTART_POLICY=off): stopping"
    ]


RECORD = record.encode_record(b"T", b"body", record.encode_properties({}))


def test_reconfigure_restarts_a_service_cleanly_with_new_keys_on_its_endpoint(
    tmp_path: Path,
) -> None:
    """What a role change in controller mode does: the store restarted as a SLAVE's refuses
    puts, on the endpoint it had; later crashes restart it with the new keys too."""
    settings = {"storePathRootDir": str(tmp_path), "storeEndpoint": "tcp://127.0.0.1:0"}
    settings["storeFeedEndpoint"] = "tcp://127.0.0.1:0"
    store = start_service("broker-store", service_args(None, settings))
    cluster = LocalCluster([store])
    said: list[str] = []
    policy = replace(RestartPolicy(), first_wait=0.1, max_wait=0.5)
    supervisor = Supervisor(cluster, policy=policy, say=said.append)
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop,), daemon=True)
    thread.start()
    endpoint = store.endpoints["endpoint"]

    def put() -> object:
        with BlockingClient(endpoint) as client:
            answer = client.call(StorePutRequest(topic="T", queue_id=0, count=1), 5000, [RECORD])
        assert answer is not None
        return answer[0]

    try:
        assert isinstance(put(), StorePutReply)
        supervisor.reconfigure("broker-store", {"brokerRole": "SLAVE", "brokerId": "1"})
        wait_for(lambda: cluster.processes[0] is not store, 10, "the store restarted")
        wait_for(lambda: cluster.processes[0].announced, 30, "its READY line")
        assert cluster.processes[0].endpoints["endpoint"] == endpoint
        refused = put()
        assert isinstance(refused, ErrorReply) and "SLAVE" in refused.message, refused
        assert said[0] == "broker-store restarting with brokerRole=SLAVE brokerId=1"
        wait_for(
            lambda: said[1:] == [f"broker-store is back (pid {cluster.processes[0].pid})"],
            5,
            "back",
        )
        assert store.proc.returncode == 0  # a clean stop, not a kill
        cluster.processes[0].proc.kill()  # a crash after the change: restarted as a slave
        wait_for(lambda: supervisor.restarts == 1 and cluster.processes[0].announced, 30, "back")
        assert isinstance(put(), ErrorReply)
    finally:
        stop.set()
        thread.join(10)
        cluster.stop()


def key_found_after(admin: Admin, topic: str, key: str, acked: float, deadline_s: float) -> float:
    """Seconds from a send's acknowledgement (`acked`, monotonic) until queryMsgByKey finds
    its key; deadline_s if it never does by then."""
    while time.monotonic() - acked < deadline_s:
        try:
            if admin.query_msg_by_key(topic, key):
                return time.monotonic() - acked
        except FerryError:
            pass
    return deadline_s


def test_a_key_sent_after_a_store_restart_is_found_within_500_ms_of_its_ack(
    tmp_path: Path, namesrv: str
) -> None:
    """kill -9 of the store under sends (so that the index may hold a catch-up read when it
    dies, and its feed misses the first notices of the restart): each key sent afterwards,
    one at a time, is found by queryMsgByKey within 500 ms of its send's acknowledgement
    (issue 42 §1; was up to ~2 s: notices during a catch-up read waited for the status
    check, and a read held by the dead store waited out its 10 s timeout)."""
    broker = ServedBroker(tmp_path / "broker", namesrv)
    try:
        create_topic(namesrv, "KeyAfterRestart", 4)
        with (
            Producer("pg-key-restart", namesrv, send_timeout_ms=2000) as producer,
            Admin(namesrv, timeout_ms=1000) as admin,
        ):
            stop = threading.Event()

            def load() -> None:
                i = 0
                while not stop.is_set():
                    i += 1
                    m = Message("KeyAfterRestart", b"x" * 512, keys=f"load-{i}")
                    with contextlib.suppress(FerryError):
                        producer.send(m)

            worker = threading.Thread(target=load, name="key-restart-load")
            worker.start()
            try:
                wait_for(lambda: bool(admin.query_msg_by_key("KeyAfterRestart", "load-50")), 30)
                old = broker.kill9("broker-store")
                broker.wait_restarted("broker-store", old)
                wait_for(lambda: send_ok(producer, "KeyAfterRestart", b"back"), 30, "a send")
            finally:
                stop.set()
                worker.join(timeout=30)
            lags = []
            for i in range(20):
                key = f"after-restart-{i}"
                producer.send(Message("KeyAfterRestart", f"probe {i}".encode(), keys=key))
                acked = time.monotonic()
                lags.append(key_found_after(admin, "KeyAfterRestart", key, acked, 5.0))
        worst = max(lags)
        assert worst <= 0.5, f"worst {worst:.3f} s from ack to queryMsgByKey: {lags}"
    finally:
        broker.close()
