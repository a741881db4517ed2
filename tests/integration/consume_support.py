"""Helpers of the producer and consumer tests: what listeners received, who owns which queue,
a second broker group in the same cluster."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence

from itest_support import SMALL_STORE, Cluster, wait_for

from ferry.admin import Admin
from ferry.client import ConsumeResult, MessageExt, MessageQueue, PushConsumer
from ferry.runtime.launcher import ServiceProcess, start_broker_services


class Received:
    """Every delivery a listener saw, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.msgs: list[MessageExt] = []
        self.by_member: dict[str, list[MessageExt]] = {}

    def listener(
        self, member: str = "", verdict: Callable[[MessageExt], ConsumeResult] | None = None
    ) -> Callable[[list[MessageExt]], ConsumeResult]:
        def listen(msgs: list[MessageExt]) -> ConsumeResult:
            result = ConsumeResult.SUCCESS
            with self.lock:
                for msg in msgs:
                    self.msgs.append(msg)
                    self.by_member.setdefault(member, []).append(msg)
                    if verdict is not None:
                        answer = verdict(msg)
                        if answer is not ConsumeResult.SUCCESS:
                            result = answer
            return result

        return listen

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [m.body for m in self.msgs]

    def count(self) -> int:
        with self.lock:
            return len(self.msgs)

    def unique(self) -> int:
        with self.lock:
            return len({m.body for m in self.msgs})

    def duplicates(self) -> int:
        with self.lock:
            return sum(n - 1 for n in Counter(m.body for m in self.msgs).values())


def owners(consumers: Sequence[PushConsumer], topic: str) -> dict[MessageQueue, list[str]]:
    """queue -> members consuming it now."""
    out: dict[MessageQueue, list[str]] = {}
    for consumer in consumers:
        for queue in consumer.assignment():
            if queue.topic == topic:
                out.setdefault(queue, []).append(consumer.client_id)
    return out


def wait_for_split(
    consumers: Sequence[PushConsumer], topic: str, queues: int, timeout: float = 30.0
) -> dict[MessageQueue, str]:
    """Waits until each of the topic's queues has exactly one owner among the consumers."""

    def split() -> dict[MessageQueue, str] | None:
        found = owners(consumers, topic)
        if len(found) == queues and all(len(m) == 1 for m in found.values()):
            return {q: m[0] for q, m in found.items()}
        return None

    result: dict[MessageQueue, str] = wait_for(split, timeout, f"{topic} split among members")
    return result


def create_topic(namesrv: str, topic: str, queues: int, brokers: int = 1) -> None:
    """Creates the topic on every broker and waits until the name server routes to them."""
    with Admin(namesrv) as admin:
        wait_for(lambda: len(admin.master_addrs()) == brokers, 10, "brokers registered")
        admin.create_topic(topic, queues, queues)

        def routed() -> bool:
            try:
                return len(admin.topic_route(topic).queue_datas) == brokers
            except Exception:  # noqa: BLE001 - not registered yet
                return False

        wait_for(routed, 10, f"route of {topic}")


def add_broker(cluster: Cluster, name: str) -> list[ServiceProcess]:
    """Starts a second broker group (its own store and remoting) in the cluster."""
    before = len(cluster.local.processes)
    start_broker_services(
        cluster.local,
        str(cluster.dir / name),
        namesrv_addr=cluster.namesrv,
        overrides={**SMALL_STORE, "brokerName": name},
    )
    added: list[ServiceProcess] = cluster.local.processes[before:]
    return added


def remoting_of(processes: list[ServiceProcess]) -> ServiceProcess:
    return next(p for p in processes if p.name == "broker-remoting")
