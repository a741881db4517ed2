"""What a peer puts in a request's trace context or counts never makes OpenTelemetry log or
fail per request (found by bench/fuzz_ports.py, issue 25.5)."""

from __future__ import annotations

import logging

import pytest
from opentelemetry import trace

from ferry.runtime import telemetry

TRACEPARENT = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"


@pytest.mark.parametrize("tracestate", ["Bad=1", "\xff=x", "a=", "a=b,=c", "k=" + "v" * 300])
def test_malformed_tracestate_is_dropped_quietly(
    tracestate: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="opentelemetry"):
        ctx = telemetry.context_from(TRACEPARENT, tracestate)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert ctx is not None
    span_ctx = trace.get_current_span(ctx).get_span_context()
    assert span_ctx.trace_id == int("ab" * 16, 16)
    assert len(span_ctx.trace_state) == 0


def test_well_formed_tracestate_is_kept() -> None:
    ctx = telemetry.context_from(TRACEPARENT, "congo=t61rcWkgMzE, tenant@sys=00f067")
    assert ctx is not None
    state = trace.get_current_span(ctx).get_span_context().trace_state
    assert dict(state) == {"congo": "t61rcWkgMzE", "tenant@sys": "00f067"}


def test_ints_outside_int64_become_text() -> None:
    attrs = telemetry.span_attributes({"n": 2**64 - 1, "m": -(2**63), "ok": 5, "flag": True})
    assert attrs == {"n": str(2**64 - 1), "m": -(2**63), "ok": 5, "flag": True}
