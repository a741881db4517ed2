"""Fixtures for cross-service tests (helpers live in itest_support.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from itest_support import Cluster, OtlpSink, start_cluster
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ferry.runtime import telemetry


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


@pytest.fixture(scope="module")
def sink() -> Iterator[OtlpSink]:
    """An OTLP receiver shared by a module: its module-scoped cluster exports to it."""
    s = OtlpSink()
    yield s
    s.close()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans this process (the SDK side of a test) ends while the test runs."""
    exporter: InMemorySpanExporter = telemetry.capture_spans()
    yield exporter
    exporter.shutdown()
