"""Every port fuzzed, as a standing test (issue 25.5): each ZeroMQ request port of each service,
the store's feed, and the console's pages and OTLP receiver get random frames, mutated valid
envelopes and envelopes of every request type with generated values (fuzz_frames.py); the
RocketMQ doors of the name server and the broker get random bytes, lying lengths, mutated
frames, bad headers and commands of every reading code (fuzz_door_frames.py, issue 40.6); the
gRPC proxy's port gets bytes that are not HTTP/2, malformed and mutated protobuf bodies for
every method, unknown enum values and Telemetry streams without Settings (fuzz_grpc_target.py,
issue 41.5).

Expected, and checked after each port's run: no process died or restarted, each frame got a
typed reply or was dropped, a ping right after each one was answered in time, no handler
crashed on the input, and what was stored before the run reads back the same (the CommitLog's
bytes, the kept topic's offsets and messages). Derandomized, a few seconds per port; the longer
run is bench/fuzz_ports.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fuzz_door_frames import READ_CODES, door_inputs
from fuzz_door_target import (
    DoorTarget,
    cluster_info_probe,
    max_offset_probe,
    same_as,
    served_codes,
)
from fuzz_frames import KEPT_TOPIC, SAFE_TYPES, any_frames, otlp_bodies, page_paths, well_formed
from fuzz_grpc_target import METHODS, GrpcTarget, grpc_inputs, tcp_garbage
from fuzz_targets import (
    FeedTarget,
    HttpTarget,
    Tally,
    ZmqTarget,
    drive,
    kept_offsets,
    served_types,
    stored_log,
)
from hypothesis import strategies as st
from itest_support import SMALL_STORE

from ferry.client import ConsumeFromWhere, Message, Producer, PullConsumer
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import (
    PingRequest,
)
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.remoting_client import RemotingClient

pytestmark = pytest.mark.integration

# every service with a request port; a new one must be added here (test_every_port_is_fuzzed)
SERVICES = [
    "namesrv",
    "broker-remoting",
    "broker-store",
    "index",
    "scheduler",
    "checkback",
    "ha-replicator",
]
# every service with a RocketMQ door, and the probe each door must answer after every input
DOORS = {"namesrv": cluster_info_probe, "broker-remoting": max_offset_probe(KEPT_TOPIC)}
BUDGET_S = 5.0  # per port: the whole module stays near a minute on 2 busy cores
MAX_EXAMPLES = 3000
KEPT = 20


@dataclass
class Before:
    pids: dict[str, int]
    log: bytes
    offsets: list[Any]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Before]]:
    data = tmp_path_factory.mktemp("fuzz")
    local = start_local_cluster(
        str(data), overrides=SMALL_STORE, console_port=0, rocketmq_port=0, proxy_port=0
    )
    try:
        with Producer("pg-kept", local.namesrv_addr) as producer:
            for i in range(KEPT):
                producer.send(Message(KEPT_TOPIC, f"kept-{i}".encode()))
        pids = {sp.name: sp.pid for sp in local.processes}
        yield local, Before(pids, stored_log(local.store_endpoint), kept_offsets(local.broker_addr))
    finally:
        local.stop()


def _endpoint(local: LocalCluster, name: str) -> str:
    eps = local.get(name).endpoints
    return eps.get("endpoint") or eps["addr"]


def _check(tally: Tally, local: LocalCluster, before: Before) -> None:
    findings = "\n".join(str(f) for f in tally.findings[:10])
    assert not tally.findings, f"{len(tally.findings)} finding(s):\n{findings}"
    for sp in local.processes:
        assert sp.alive(), f"{sp.name} died:\n{sp.recent_output()}"
        assert sp.pid == before.pids[sp.name], f"{sp.name} was restarted"


def test_every_port_is_fuzzed(fuzzed: tuple[LocalCluster, Before]) -> None:
    local, _ = fuzzed
    served = {sp.name for sp in local.processes if {"endpoint", "addr"} & set(sp.endpoints)}
    assert served - {"console"} == set(SERVICES)
    doors = {sp.name for sp in local.processes if "rocketmq" in sp.endpoints}
    assert doors == set(DOORS)
    assert {sp.name for sp in local.processes if "grpc" in sp.endpoints} == {"proxy"}


@pytest.mark.parametrize("name", SERVICES)
def test_request_port_survives_fuzzing(name: str, fuzzed: tuple[LocalCluster, Before]) -> None:
    local, before = fuzzed
    target = ZmqTarget(name, _endpoint(local, name))
    try:
        served = served_types(target, SAFE_TYPES)
        assert PingRequest in served and len(served) < len(SAFE_TYPES)
        # aimed at what the port serves, and now and then at what it does not
        frames = st.one_of(any_frames(served), well_formed(SAFE_TYPES))
        fed = drive(target.feed, frames, budget_s=BUDGET_S, max_examples=MAX_EXAMPLES)
        assert target.ping(), "no answer after the run"
    finally:
        target.close()
    assert fed >= 50, f"only {fed} frames in {BUDGET_S} s"
    # most frames are refused with a typed error; some well-formed ones are served
    assert target.tally.errors > fed // 4
    _check(target.tally, local, before)


@pytest.mark.parametrize("name", sorted(DOORS))
def test_rocketmq_door_survives_fuzzing(name: str, fuzzed: tuple[LocalCluster, Before]) -> None:
    local, before = fuzzed
    addr = local.get(name).endpoints["rocketmq"]
    log, offsets = stored_log(local.store_endpoint), kept_offsets(local.broker_addr)
    with RemotingClient(addr) as client:
        probe = same_as(DOORS[name], DOORS[name](client))
    target = DoorTarget(name, addr, probe)
    served = served_codes(addr, READ_CODES)
    assert 0 < len(served) < len(READ_CODES) // 2, served
    fed = drive(target.feed, door_inputs(served), budget_s=BUDGET_S, max_examples=MAX_EXAMPLES)
    assert target.probe(), "no answer after the run"
    _check(target.tally, local, before)
    assert fed >= 50, f"only {fed} inputs in {BUDGET_S} s"
    # refused mostly (unknown codes, bad fields), and some well-formed requests served
    assert target.tally.errors > 10 and target.tally.replies > 0, target.codes
    assert stored_log(local.store_endpoint) == log
    assert kept_offsets(local.broker_addr) == offsets


def test_proxy_grpc_port_survives_fuzzing(fuzzed: tuple[LocalCluster, Before]) -> None:
    local, before = fuzzed
    target = GrpcTarget(local.proxy_addr, KEPT_TOPIC)
    try:
        assert target.healthy(), "the proxy does not serve before the run"
        # every method at least once: an empty body (all defaults) and bytes that are no
        # protobuf, with and without a client id
        for name in sorted(METHODS):
            for body in (b"", b"\xff\xff\xff\xff", b"\x0a\x05ab"):
                target.call(name, body, True)
            target.call(name, b"\xff\xff", False)
        fed = drive(
            lambda x: target.call(*x),
            grpc_inputs(KEPT_TOPIC),
            budget_s=BUDGET_S * 2,
            max_examples=MAX_EXAMPLES,
        )
        drive(target.raw, tcp_garbage(), budget_s=BUDGET_S / 2, max_examples=100)
        not_settings = METHODS["Telemetry"].request()
        not_settings.thread_stack_trace.nonce = "n"
        for commands in ([], [not_settings.SerializeToString()]):
            target.silent_telemetry(commands)
        assert target.healthy(), "no answer after the run"
    finally:
        target.close()
    print(f"proxy: {fed} fuzzed calls; codes by method {target.codes}")
    assert fed >= 50, f"only {fed} calls in {BUDGET_S * 2} s"
    assert target.tally.errors > fed // 4  # most refused with a typed status
    _check(target.tally, local, before)


# header fields whose numbers fit no Java int or long, which the fuzzing found answered with
# "internal error": the routes pass them on unbounded (ext_int) and the request to the store
# fails to encode (OverflowError), or the store fails on a maxMsgBytes near 2**63
_PULL = {"topic": KEPT_TOPIC, "queueId": "0", "consumerGroup": "cg-fuzz", "queueOffset": "0"}
OUT_OF_RANGE = [
    (30, {"topic": KEPT_TOPIC, "queueId": "1" * 30}),
    (31, {"topic": KEPT_TOPIC, "queueId": str(2**64)}),
    (29, {"topic": KEPT_TOPIC, "queueId": "0", "timestamp": str(-(2**63) - 1)}),
    (33, {"offset": "1" * 30}),
    (11, {**_PULL, "queueOffset": "1" * 30}),
    (11, {**_PULL, "maxMsgBytes": str(2**63 - 1)}),
]


def test_door_refuses_numbers_out_of_range(fuzzed: tuple[LocalCluster, Before]) -> None:
    local, _ = fuzzed
    with RemotingClient(local.broker_rocketmq_addr) as client:
        answers = [client.call(code, fields) for code, fields in OUT_OF_RANGE]
    crashed = [(a.code, a.remark) for a in answers if a.remark.startswith("internal error")]
    assert not crashed
    assert {a.code for a in answers} == {ResponseCode.INVALID_PARAMETER}


def test_store_feed_survives_fuzzing(fuzzed: tuple[LocalCluster, Before]) -> None:
    local, before = fuzzed
    store = ZmqTarget("broker-store feed", local.store_endpoint)
    feed = FeedTarget(local.get("broker-store").endpoints["feed"], store)
    messages = st.lists(
        st.one_of(st.binary(max_size=24), st.sampled_from([b"\x01", b"\x00", b"\x01feed"])),
        min_size=1,
        max_size=4,
    )
    try:
        drive(feed.feed, messages, budget_s=BUDGET_S / 2, max_examples=MAX_EXAMPLES)
    finally:
        feed.close()
        store.close()
    _check(store.tally, local, before)


def test_console_survives_fuzzing(fuzzed: tuple[LocalCluster, Before]) -> None:
    local, before = fuzzed
    target = HttpTarget(local.console_url)
    drive(target.get, page_paths(), budget_s=BUDGET_S, max_examples=MAX_EXAMPLES)
    drive(
        lambda b: target.post_traces(*b),
        otlp_bodies(),
        budget_s=BUDGET_S,
        max_examples=MAX_EXAMPLES,
    )
    raw = st.one_of(
        st.binary(max_size=200),
        st.sampled_from([b"GET / HTTP/1.1\r\nHost: \xff\r\n\r\n", b"GET /%ff%fe HTTP/1.0\r\n\r\n"]),
    )
    drive(target.raw, raw, budget_s=BUDGET_S / 2, max_examples=100)
    assert target.tally.sent >= 50
    _check(target.tally, local, before)


def test_stored_data_is_unchanged_after_fuzzing(fuzzed: tuple[LocalCluster, Before]) -> None:
    """Runs last (file order): what was stored before any fuzzing reads back the same."""
    local, before = fuzzed
    after_log = stored_log(local.store_endpoint)
    assert after_log[: len(before.log)] == before.log
    assert kept_offsets(local.broker_addr) == before.offsets
    with PullConsumer(
        "cg-kept", local.namesrv_addr, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe(KEPT_TOPIC)
        got: list[bytes] = []
        for _ in range(50):
            got += [m.body for m in consumer.poll(timeout=0.5)]
            if len(got) >= KEPT:
                break
    assert sorted(got) == sorted(f"kept-{i}".encode() for i in range(KEPT))
    _check(Tally(), local, before)


def test_fuzz_inputs_are_the_same_every_run() -> None:
    """Derandomized: a failure found here is found again on the next run."""
    runs: list[list[Any]] = []
    for _ in range(2):
        seen: list[Any] = []

        def keep(frames: Any, seen: list[Any] = seen) -> bool:
            seen.append(frames)
            return True

        drive(keep, any_frames(), budget_s=5, max_examples=30)
        runs.append(seen)
    assert runs[0] == runs[1] and len(runs[0]) == 30
