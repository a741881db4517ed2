"""Fixtures for cross-service tests (helpers live in itest_support.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from itest_support import Cluster, OtlpSink, start_cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = start_cluster(tmp_path)
    try:
        yield c
    finally:
        c.local.stop()


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []

    def make(env: dict[str, str] | None = None, **overrides: str) -> Cluster:
        c = start_cluster(tmp_path, env, overrides)
        started.append(c)
        return c

    yield make
    for c in started:
        c.local.stop()


@pytest.fixture
def otlp_sink() -> Iterator[OtlpSink]:
    sink = OtlpSink()
    yield sink
    sink.close()
