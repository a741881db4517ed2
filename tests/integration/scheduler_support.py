"""Helpers for the scheduler's tests: a cluster with short delay levels, restarting (or
killing) the scheduler alone, draining a topic, and the scheduler's status."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from itest_support import Cluster, RawClient, start_cluster

from ferry.client import ConsumeFromWhere, MessageExt, PullConsumer
from ferry.protocol.messages import SchedulerStatusReply, SchedulerStatusRequest
from ferry.runtime.launcher import service_args, start_service

SHORT_LEVELS = {"messageDelayLevel": "1s 2s 3s"}


def scheduler_cluster(tmp_path: Path, **overrides: str) -> Cluster:
    return start_cluster(tmp_path, overrides={**SHORT_LEVELS, **overrides})


def scheduler_status(cluster: Cluster) -> SchedulerStatusReply:
    client = RawClient(cluster.broker_addr)
    try:
        reply, _ = client.call(SchedulerStatusRequest())
    finally:
        client.close()
    assert isinstance(reply, SchedulerStatusReply), reply
    return reply


def stop_scheduler(cluster: Cluster, *, kill: bool) -> str:
    """Stops (or kill -9s) the scheduler; returns its endpoint for the restart."""
    sp = cluster.local.get("scheduler")
    endpoint = sp.endpoints["endpoint"]
    if kill:
        sp.kill()
    else:
        sp.stop()
    cluster.local.processes.remove(sp)
    return endpoint


def start_scheduler(cluster: Cluster, endpoint: str) -> None:
    """Starts the scheduler again on the same endpoint (remoting keeps talking to it)."""
    settings = {
        **cluster.overrides,
        "storePathRootDir": str(cluster.dir / "broker-a"),
        "storeEndpoint": cluster.local.store_endpoint,
        "schedulerEndpoint": endpoint,
    }
    cluster.local.processes.append(start_service("scheduler", service_args(None, settings)))


def drain(
    consumer: PullConsumer,
    want: int,
    timeout: float = 60.0,
    on_message: Callable[[MessageExt], None] | None = None,
) -> list[MessageExt]:
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for msg in consumer.poll(timeout=0.5):
            got.append(msg)
            if on_message is not None:
                on_message(msg)
    return got


def consumer_of(cluster: Cluster, group: str, topic: str) -> PullConsumer:
    consumer = PullConsumer(group, cluster.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.start()
    consumer.subscribe(topic, "*")
    return consumer
