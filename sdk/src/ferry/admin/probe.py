"""mqadmin clusterRT: the send round trip to each broker master, measured by sending to a
queue of a topic on each in turn."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ferry.admin.locator import MASTER_ID, BrokerLocator
from ferry.client.message import Message, MessageQueue
from ferry.client.producer import Producer
from ferry.protocol.errors import BrokerNotExistError, FerryError
from ferry.protocol.names import check_topic

PRODUCER_GROUP = "CLUSTER_RT_PRODUCER"


@dataclass(frozen=True, slots=True)
class RtTarget:
    cluster: str
    addr: str
    queue: MessageQueue  # queue 0 of the topic on this broker


@dataclass(frozen=True, slots=True)
class RtRound:
    round: int
    avg_ms: float
    max_ms: float
    ok: int
    failed: int


def rt_targets(brokers: BrokerLocator, topic: str, cluster: str | None) -> list[RtTarget]:
    check_topic(topic)
    route = brokers.topic_route(topic)
    writable = {q.broker_name for q in route.queue_datas if q.write_queue_nums > 0}
    out = [
        RtTarget(b.cluster, b.broker_addrs[MASTER_ID], MessageQueue(topic, b.broker_name, 0))
        for b in sorted(route.broker_datas, key=lambda b: (b.cluster, b.broker_name))
        if MASTER_ID in b.broker_addrs
        and b.broker_name in writable
        and (cluster is None or b.cluster == cluster)
    ]
    if not out:
        raise BrokerNotExistError(
            f"no writable master of {cluster or 'any cluster'} serves {topic}"
        )
    return out


def cluster_rt(
    namesrv: str,
    targets: list[RtTarget],
    amount: int,
    size: int,
    rounds: int,
    interval_s: float,
    **client_options: Any,
) -> list[tuple[RtTarget, RtRound]]:
    body = b"x" * size
    out: list[tuple[RtTarget, RtRound]] = []
    with Producer(PRODUCER_GROUP, namesrv, **client_options) as producer:
        for n in range(1, rounds + 1):
            if n > 1 and interval_s:
                time.sleep(interval_s)  # the pause the operator asked for between rounds
            for target in targets:
                times: list[float] = []
                failed = 0
                for _ in range(amount):
                    start = time.perf_counter()
                    try:
                        producer.send(Message(target.queue.topic, body), target.queue)
                    except FerryError:
                        failed += 1
                        continue
                    times.append((time.perf_counter() - start) * 1000)
                avg = sum(times) / len(times) if times else 0.0
                out.append(
                    (
                        target,
                        RtRound(
                            n, round(avg, 3), round(max(times, default=0.0), 3), len(times), failed
                        ),
                    )
                )
    return out
