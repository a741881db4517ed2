"""Recovery after any restart (issue 25.2): once a killed service is back, clients get what
they would have got without the kill, within seconds: routes from a restarted name server,
answers from an index that caught up from the log, every delayed message once from a
scheduler that caught up, and messages for a consumer whose long poll was held at the kill."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from consume_support import Received, create_topic
from itest_support import FERRY, LineReader, RawClient, alive, children_of, wait_for
from supervision_support import FAST_POLICY, ServedBroker, child_running, cmdline

from ferry.admin import Admin
from ferry.admin import queries as q
from ferry.client import (
    ConsumeFromWhere,
    FerryError,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
    SendStatus,
)
from ferry.protocol.messages import SchedulerStatusReply, SchedulerStatusRequest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

# a restart held back this long leaves a window in which clients use the broker without the
# service (the fast policy restarts in 0.1 s, which a test cannot reliably send into)
SLOW_RESTART = "first_wait=1,max_wait=1,max_crashes=5,window=60"

# how soon a consumer whose long poll was held at the kill gets a message sent after the restart
# (without the fix for the store's kill: the hold time and remoting's grace, 25 s)
HELD_POLL_ANSWERED_WITHIN_S = 5.0

# the scheduler's delivery put timeout (scheduler/delivery.py PUT_TIMEOUT_S), a little less

# how soon a new client must find routes at a restarted name server (the broker's own period,
# registerNameServerPeriod, stays 30 s)
ROUTES_BACK_WITHIN_S = 5.0


class ServedNamesrv:
    """`ferry serve namesrv` on a free port, restarted by its supervisor after a kill."""

    def __init__(self, policy: str = FAST_POLICY) -> None:
        env = {**os.environ, "FERRY_RESTART_POLICY": policy}
        argv = [FERRY, "serve", "namesrv", "--set", "listenPort=0"]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        assert self.proc.stdout is not None
        self.reader = LineReader(self.proc.stdout)
        self.addr = self.reader.wait_for_prefix("READY namesrv addr=").split("addr=", 1)[1]

    def pid(self) -> int:
        pid = child_running(self.proc.pid, "ferry.namesrv")
        assert pid is not None, "no name server under its supervisor"
        return pid

    def kill9_and_wait_back(self) -> tuple[float, float]:
        """kill -9 of the name server; returns the monotonic times of the kill and of its
        successor's ready line."""
        old = self.pid()
        killed_at = time.monotonic()
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: not alive(old), 10, "the name server to die")
        self.reader.wait_for_prefix("[supervisor] namesrv is back", timeout=30)
        back_at = time.monotonic()
        assert self.pid() != old
        return killed_at, back_at

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.reader.close()


@pytest.fixture
def namesrv() -> Iterator[ServedNamesrv]:
    served = ServedNamesrv()
    try:
        yield served
    finally:
        served.close()


def stop_cleanly(broker: ServedBroker) -> None:
    """SIGTERM to `ferry serve broker`: it must exit 0; if it hangs, which services are left
    and its last lines go in the failure."""
    try:
        code = broker.stop()
    except subprocess.TimeoutExpired:
        left = {pid: " ".join(cmdline(pid)[2:4]) for pid in children_of(broker.proc.pid)}
        pytest.fail(
            f"ferry serve broker still running 60 s after SIGTERM: {left}\n"
            + "\n".join(broker.reader.lines[-30:])
        )
    assert code == 0


def send_ok(producer: Producer, topic: str, body: bytes, keys: list[str] | None = None) -> bool:
    try:
        return producer.send(Message(topic, body, keys=keys)).status == SendStatus.SEND_OK
    except FerryError:
        return False


def test_a_restarted_name_server_routes_to_the_broker_within_seconds(
    tmp_path: Path, namesrv: ServedNamesrv
) -> None:
    """kill -9 of the name server under `ferry serve namesrv`: once it is back, a NEW
    producer (no routes cached) sends within seconds, not at the broker's next periodic
    registration (30 s away)."""
    broker = ServedBroker(tmp_path / "broker", namesrv.addr)
    try:
        create_topic(namesrv.addr, "RoutedAgain", 2)
        times: list[tuple[float, float]] = []  # (from the kill, from the ready line)
        for _round in range(3):
            killed_at, back_at = namesrv.kill9_and_wait_back()
            with Producer("pg-routed-again", namesrv.addr, send_timeout_ms=2000) as producer:
                wait_for(
                    lambda p=producer: send_ok(p, "RoutedAgain", b"x"),  # type: ignore[misc]
                    30,
                    "a send by a new producer",
                )
            sent_at = time.monotonic()
            times.append((sent_at - killed_at, sent_at - back_at))
        print(
            "name server kill -9 -> first send by a new producer (after its ready line): "
            + ", ".join(f"{k:.2f} s ({b:.2f} s)" for k, b in times)
        )
        assert max(b for _, b in times) < ROUTES_BACK_WITHIN_S, times
        stop_cleanly(broker)
    finally:
        broker.close()


class Sender:
    """Sends messages on a thread until stopped; keeps the bodies that were acknowledged."""

    def __init__(self, namesrv: str, topic: str, make: Callable[[int], Message]) -> None:
        self.acked: list[Message] = []
        self.ids: dict[str, bytes] = {}  # msg id -> body of each acknowledged send
        self._lock = threading.Lock()
        self.failed = 0
        self._stop = threading.Event()
        self._producer = Producer(f"pg-{topic}", namesrv, send_timeout_ms=2000)
        self._producer.start()
        self._make = make
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            msg = self._make(i)
            i += 1
            try:
                result = self._producer.send(msg)
            except FerryError:
                self.failed += 1
                continue
            if result.status == SendStatus.SEND_OK:
                with self._lock:
                    self.acked.append(msg)
                    self.ids[result.msg_id] = msg.body
            else:
                self.failed += 1

    def acked_ids(self) -> list[str]:
        with self._lock:
            return list(self.ids)

    def wait_more(self, n: int, timeout: float = 30) -> None:
        """Waits until n more sends than now were acknowledged."""
        target = len(self.acked) + n
        wait_for(lambda: len(self.acked) >= target, timeout, f"{n} more acknowledged sends")

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(30)
        self._producer.shutdown()


@pytest.mark.parametrize("killed", ["index", "broker-store"])
def test_every_acknowledged_key_is_found_after_a_kill_under_load_of(
    tmp_path: Path, namesrv: ServedNamesrv, killed: str
) -> None:
    """kill -9 of the index (or the store) of `ferry serve broker` while a producer sends keyed
    messages, restarted 1 s later: queryMsgByKey finds every acknowledged key, those sent
    while the index was down included (it catches up from the CommitLog, not from the feed
    it missed)."""
    broker = ServedBroker(tmp_path / "broker", namesrv.addr, SLOW_RESTART)
    sender: Sender | None = None
    try:
        create_topic(namesrv.addr, "Keyed", 4)
        sender = Sender(
            namesrv.addr, "Keyed", lambda i: Message("Keyed", b"%d" % i, keys=[f"k{i}"])
        )
        sender.wait_more(100)
        old = broker.kill9(killed)
        at_kill = len(sender.acked)
        broker.wait_restarted(killed, old)
        back_at = time.monotonic()
        while_down = len(sender.acked) - at_kill
        if killed == "index":
            assert while_down > 0, "nothing was sent while the index was down"
        newest = sender.acked[-1].keys[0]
        with Admin(namesrv.addr) as admin:
            wait_for(lambda: q.query_msg_by_key(admin, "Keyed", newest), 30, "the newest key")
            caught_up = time.monotonic() - back_at
            sender.wait_more(100)
            sender.stop()
            keys = [m.keys[0] for m in sender.acked]
            found: dict[str, list[bytes]] = {}

            def missing_keys() -> list[str]:
                for key in keys:
                    if key[1:].encode() not in found.get(key, []):
                        found[key] = [m.body for m in q.query_msg_by_key(admin, "Keyed", key)]
                return [key for key in keys if key[1:].encode() not in found[key]]

            # the index follows the log behind the sends (its feed is read every 20 ms, a
            # catch-up read after a kill reads again for what arrived meanwhile)
            settled = time.monotonic()
            wait_for(lambda: not missing_keys(), 30, f"all {len(keys)} acknowledged keys indexed")
            lag = time.monotonic() - settled
        if killed == "index":  # the store's kill may store a send twice (the client retried)
            twice = [key for key in keys if len(found[key]) > 1]
            assert twice == [], f"{len(twice)} keys indexed twice: {twice[:5]}"
        print(
            f"kill -9 of {killed}: {len(keys)} keys found, {while_down} acknowledged while it "
            f"was down, {sender.failed} sends failed; the newest key then found "
            f"{caught_up:.2f} s after its ready line; all keys found {lag:.2f} s after the "
            "last send, queries included"
        )
        stop_cleanly(broker)
    finally:
        if sender is not None:
            sender.stop()
        broker.close()


def scheduler_status_via(broker_addr: str) -> SchedulerStatusReply:
    client = RawClient(broker_addr)
    try:
        reply, _ = client.call(SchedulerStatusRequest())
    finally:
        client.close()
    assert isinstance(reply, SchedulerStatusReply), reply
    return reply


def done_status(broker_addr: str) -> SchedulerStatusReply | None:
    """The scheduler's status once every level and timer it holds is delivered, else None."""
    status = scheduler_status_via(broker_addr)
    done = status.timer_pending == 0 and all(lv.offset == lv.max_offset for lv in status.levels)
    return status if done else None


def drain_ids(
    consumer: PullConsumer, want: set[str], seen: dict[str, list[MessageExt]], timeout: float = 60
) -> None:
    """Polls until every id of want was seen (keeping each delivery), or the timeout."""
    deadline = time.monotonic() + timeout
    while not want <= set(seen) and time.monotonic() < deadline:
        for m in consumer.poll(timeout=0.5):
            seen.setdefault(m.msg_id, []).append(m)


def copies(msgs: list[MessageExt]) -> str:
    """Where each delivered copy of one message lies, for a failure's message."""
    return "; ".join(
        f"queue {m.queue.queue_id} offset {m.queue_offset} log {m.commitlog_offset} "
        f"stored {m.store_timestamp} from {m.properties.get('SCHEDULED_FROM')}"
        for m in msgs
    )


@pytest.mark.parametrize("killed", ["scheduler", "broker-store"])
def test_delayed_messages_arrive_once_after_a_kill_of(
    tmp_path: Path, namesrv: ServedNamesrv, killed: str
) -> None:
    """Delay level 1 (1 s) and timer messages sent before a kill -9 of the scheduler (some
    delivered, some due), while it is down (1 s) and after it, are each delivered exactly
    once (counted by message id) once it is back. Killing the store instead, with deliveries
    under way (its sends stop first: a send retried across the kill may be stored twice),
    every message is delivered once as well."""
    broker = ServedBroker(tmp_path / "broker", namesrv.addr, SLOW_RESTART)
    sender: Sender | None = None

    def delayed(i: int) -> Message:
        if i % 2:
            return Message("Later", b"%d" % i, delay_level=1)
        return Message("Later", b"%d" % i, deliver_at_ms=time.time_ns() // 1_000_000 + 1000)

    consumer = PullConsumer("cg-later", namesrv.addr, ConsumeFromWhere.FIRST_OFFSET)
    try:
        create_topic(namesrv.addr, "Later", 4)
        consumer.start()
        consumer.subscribe("Later", "*")
        seen: dict[str, list[MessageExt]] = {}
        sender = Sender(namesrv.addr, "Later", delayed)
        sender.wait_more(200)
        drain_ids(consumer, set(sender.acked_ids()[:20]), seen)  # deliveries under way
        if killed == "broker-store":
            sender.stop()
        old = broker.kill9(killed)
        at_kill = len(sender.acked)
        broker.wait_restarted(killed, old)
        while_down = len(sender.acked) - at_kill
        if killed == "scheduler":
            assert while_down > 0, "nothing was sent while the scheduler was down"
            sender.wait_more(100)
        sender.stop()
        want = set(sender.acked_ids())
        late = ""
        if killed == "broker-store":
            # one sent once the store is back: how long the scheduler takes to deliver it
            with Producer("pg-later-after", namesrv.addr, send_timeout_ms=5000) as producer:
                sent_at, sent_ms = time.monotonic(), time.time_ns() // 1_000_000
                after_id = producer.send(Message("Later", b"after", delay_level=1)).msg_id
            want.add(after_id)
            drain_ids(consumer, {after_id}, seen, timeout=30)
            took = time.monotonic() - sent_at
            stored_s = (
                (seen[after_id][0].store_timestamp - sent_ms) / 1000 if after_id in seen else 0
            )
            late = (
                f"; one sent after the restart (due in 1 s) came {took:.1f} s later "
                f"(put on its topic by the scheduler {stored_s:.1f} s after the send)"
            )
            # the scheduler's long polls held in the killed store are asked again as soon as its
            # connection drops (they used to wait out their 15 s timeout)
            assert took <= HELD_POLL_ANSWERED_WITHIN_S + 1, late
        drain_ids(consumer, want, seen)
        # remoting's link to the scheduler reconnected too: its status comes through remoting
        addr = broker.addr.split()[0]  # the READY line may go on with more fields (ha=)
        status = wait_for(lambda: done_status(addr), 30, "the scheduler to finish")
        skipped = status.skipped_duplicates
        drain_ids(consumer, {"none"}, seen, timeout=2)  # any late repeat
        lost = want - set(seen)
        assert lost == set(), f"{len(lost)} of {len(want)} delayed messages not delivered"
        repeated = {i: ms for i, ms in seen.items() if len(ms) > 1}
        # a put whose reply the store's kill lost is not put again blindly: the scheduler looks
        # in the log for the first copy (delivery.py), so nothing arrives twice
        unexpected = {i: copies(ms) for i, ms in repeated.items()}
        assert unexpected == {}, f"{len(unexpected)} delivered more than once: {unexpected}"
        assert set(seen) == want
        print(
            f"kill -9 of {killed}: {len(want)} delayed messages delivered once each, {while_down} "
            f"sent while it was down; {skipped} repeat(s) skipped by the scheduler's recovery{late}"
        )
        stop_cleanly(broker)
    finally:
        consumer.shutdown()
        if sender is not None:
            sender.stop()
        broker.close()


@pytest.mark.parametrize("service", ["broker-store", "broker-remoting"])
def test_a_push_consumer_waiting_on_an_empty_queue_gets_messages_sent_after_a_restart(
    tmp_path: Path, namesrv: ServedNamesrv, service: str
) -> None:
    """A push consumer whose long polls are held on empty queues when the store (or remoting)
    is killed -9: the messages sent once it is back reach the same consumer, never restarted,
    each once."""
    broker = ServedBroker(tmp_path / "broker", namesrv.addr)
    received = Received()
    consumer = PushConsumer("cg-held", namesrv.addr, consume_from=ConsumeFromWhere.FIRST_OFFSET)
    try:
        create_topic(namesrv.addr, "Held", 2)
        consumer.subscribe("Held", "*")
        consumer.register_listener(received.listener())
        consumer.start()
        with Producer("pg-held", namesrv.addr, send_timeout_ms=2000) as producer:
            assert send_ok(producer, "Held", b"warm-up")
            wait_for(lambda: received.bodies() == [b"warm-up"], 30, "the warm-up message")
            # the consumer's pulls now wait on the broker for its queues' next messages
            old = broker.kill9(service)
            broker.wait_restarted(service, old)
            back_at = time.monotonic()
            wait_for(lambda: send_ok(producer, "Held", b"after-0"), 30, "a send after the restart")
            sent_at = time.monotonic()
            after = [b"after-0"]
            for i in range(1, 20):
                assert send_ok(producer, "Held", b"after-%d" % i)
                after.append(b"after-%d" % i)
            wait_for(
                lambda: b"after-0" in received.bodies(), 60, "the first message after the restart"
            )
            first_at = time.monotonic()
            assert first_at - sent_at < HELD_POLL_ANSWERED_WITHIN_S, first_at - sent_at
            wait_for(
                lambda: set(after) <= set(received.bodies()), 60, "every message after the restart"
            )
        assert sorted(received.bodies()) == sorted([b"warm-up", *after])  # each once
        print(
            f"{service} back -> first send {sent_at - back_at:.2f} s; "
            f"that send -> its delivery to the held consumer {first_at - sent_at:.2f} s"
        )
        stop_cleanly(broker)
    finally:
        consumer.shutdown()
        broker.close()
