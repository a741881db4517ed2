"""The parts of pages that need no cluster: body previews, the waterfall, charts, times,
uptimes and sizes, topic status, producers merged over brokers."""

from __future__ import annotations

import pytest

from ferry.console.broker_pages import uptime
from ferry.console.charts import line_chart
from ferry.console.cluster_pages import topic_status
from ferry.console.message_pages import preview
from ferry.console.otlp import SpanLink, SpanRecord
from ferry.console.producer_pages import producers_of
from ferry.console.waterfall import layout
from ferry.console.web import BadRequest, fmt_bytes, fmt_duration, parse_time
from ferry.protocol.codes import Perm
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import ClientConnection, ProducerConnectionReply
from ferry.runtime.launcher import traces_to


def test_preview_cuts_text_at_the_limit_without_breaking_a_character() -> None:
    p = preview("é".encode() * 10, 5)  # 2-byte characters, limit in the middle of one
    assert p.is_text
    assert p.text == "éé"
    assert (p.shown, p.size, p.cut) == (4, 20, True)
    whole = preview(b"hello", 100)
    assert (whole.text, whole.cut) == ("hello", False)


def test_preview_shows_binary_as_hex_and_bounds_a_huge_body() -> None:
    p = preview(bytes(range(256)) * 40_000, 64)
    assert not p.is_text
    assert p.text.startswith("00 01 02")
    assert p.shown == 32
    assert p.size == 10_240_000


def _span(
    trace: str, sid: str, parent: str, start: int, end: int, links: list[SpanLink]
) -> SpanRecord:
    return SpanRecord(
        trace * 32,
        sid * 16,
        parent * 16 if parent else "",
        sid,
        1,
        "svc",
        "",
        start,
        end,
        0,
        "",
        {},
        [],
        links,
    )


def test_waterfall_nests_children_and_shares_one_time_axis_across_linked_traces() -> None:
    spans = [
        _span("a", "1", "", 0, 100, []),
        _span("a", "2", "1", 10, 60, []),
        _span("b", "3", "", 150, 200, [SpanLink("a" * 32, "1" * 16)]),
    ]
    wf = layout(spans)
    assert [t.trace_id[0] for t in wf.traces] == ["a", "b"]
    first, child = wf.traces[0].rows
    assert (first.depth, child.depth) == (0, 1)
    assert first.linked_from == ["3" * 16]
    later = wf.traces[1].rows[0]
    assert later.offset_pct == 75.0
    assert later.links[0].shown
    assert wf.window_ms == 200 / 1e6


def test_chart_draws_a_polyline_scaled_to_the_samples() -> None:
    svg = line_chart("t", [(0, 0.0), (1000, 50.0), (2000, 100.0)], "msg/s")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "<polyline" in svg
    assert "now 100 msg/s" in svg
    assert "waiting for samples" in line_chart("t", [(0, 1.0)], "x")


def test_times_parse_as_utc_or_epoch_ms_and_garbage_is_a_bad_request() -> None:
    assert parse_time("t", "1970-01-01 00:01:00") == 60_000
    assert parse_time("t", "1970-01-01T00:01") == 60_000
    assert parse_time("t", "12345") == 12345
    with pytest.raises(BadRequest):
        parse_time("t", "yesterday")
    assert issubclass(BadRequest, InvalidParameterError)


def test_dev_up_points_exporters_at_the_console_unless_otel_says_otherwise() -> None:
    env = traces_to("http://127.0.0.1:8080", {"PATH": "/bin"})
    assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "http://127.0.0.1:8080/v1/traces"
    for key in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"):
        kept = traces_to("http://127.0.0.1:8080", {key: "set"})
        assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" not in kept


def test_durations_and_sizes_read_as_people_write_them() -> None:
    assert [
        fmt_duration(s * 1000) for s in (0, 45, 125, 3600 * 3 + 240, 86_400 * 3 + 3600 * 4)
    ] == [
        "0s",
        "45s",
        "2m 5s",
        "3h 4m",
        "3d 4h",
    ]
    assert [fmt_bytes(n) for n in (None, 512, 1536, 5 * 2**30)] == [
        "-",
        "512 B",
        "1.5 KiB",
        "5.0 GiB",
    ]
    now = 1_000_000_000
    assert uptime({"bootTimestamp": str(now - 125_000)}, now) == "2m 5s"
    runtime = "[ 3 days, 4 hours, 0 minutes, 9 seconds ]"  # a broker without bootTimestamp
    assert uptime({"runtime": runtime}, now) == "3d 4h"
    assert uptime({"runtime": "garbage"}, now) == "-"


def test_a_topic_status_says_what_its_brokers_allow() -> None:
    rw, r, w = Perm.READ_WRITE, Perm.READ, Perm.WRITE
    assert [topic_status(p) for p in ([rw, rw], [r], [w], [0], [rw, r], [])] == [
        "ok",
        "read-only",
        "write-only",
        "no access",
        "partial",
        "no route",
    ]


def test_producers_are_one_row_per_client_over_the_brokers() -> None:
    def conn(cid: str, seen: int) -> ClientConnection:
        return ClientConnection(cid, "10.0.0.1", "PYTHON", "0.1.0", seen)

    replies = {
        "b:1": ProducerConnectionReply([conn("p1", 5), conn("p2", 7)], groups=["G"]),
        "a:1": ProducerConnectionReply([conn("p1", 9)], groups=["G"]),
    }
    rows = producers_of(replies, {"a:1": "broker-a", "b:1": "broker-b"})
    assert [(r.client_id, r.brokers, r.last_heartbeat_ms) for r in rows] == [
        ("p1", ["broker-a", "broker-b"], 9),
        ("p2", ["broker-b"], 7),
    ]
