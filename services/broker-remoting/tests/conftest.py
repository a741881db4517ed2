"""What the door tests share: a local cluster with its RocketMQ doors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from ferry.admin import Admin
from ferry.runtime.layouts import LocalCluster, start_local_cluster
from ferry.runtime.testing.pytest_support import wait_for

DoorCluster = Callable[..., AbstractContextManager[LocalCluster]]


@contextmanager
def _door_cluster(
    root: Path,
    *,
    topic: str = "",
    queues: int = 4,
    overrides: dict[str, str] | None = None,
) -> Iterator[LocalCluster]:
    """The cluster with both doors, its broker registered, and `topic` created if named."""
    local = start_local_cluster(str(root), rocketmq_port=0, overrides=overrides)
    try:
        assert local.broker_rocketmq_addr
        with Admin(local.namesrv_addr) as admin:  # READY comes before the registration
            wait_for(admin.master_addrs, 15, "the broker to register")
            if topic:
                admin.create_topic(topic, queues, queues)
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def door_cluster() -> DoorCluster:
    """door_cluster(root, topic=..., queues=..., overrides=...): a context manager."""
    return _door_cluster
