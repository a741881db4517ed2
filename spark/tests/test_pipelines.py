"""The pipelines on a real cluster: click-stats against a plain-Python computation over the
same events, and the archiver's exactly-once Parquet output across a restart."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from itest_support import Cluster

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer
from ferry.spark.pipelines import archiver, click_stats

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

MINUTE_MS = 60_000
BASE_MS = 1_780_000_020_000 // MINUTE_MS * MINUTE_MS  # a minute boundary


def click(url: str, gid: str, uv: str, ip: str, at_ms: int) -> bytes:
    """An event as the short-link service sends it: statsRecord is a JSON string inside."""
    record = {"uv": uv, "remoteAddr": ip, "clickTime": at_ms, "os": "Linux"}
    return json.dumps({"fullShortUrl": url, "gid": gid, "statsRecord": json.dumps(record)}).encode()


def events() -> list[tuple[str, str, str, str, int]]:
    rng = random.Random(11)
    urls = [("nurl.ink/a1", "g1"), ("nurl.ink/b2", "g1"), ("nurl.ink/c3", "g2")]
    out = []
    for _ in range(150):
        url, gid = rng.choice(urls)
        out.append(
            (
                url,
                gid,
                f"user-{rng.randrange(12)}",
                f"10.0.0.{rng.randrange(6)}",
                BASE_MS + rng.randrange(4 * MINUTE_MS),
            )
        )
    return out


def expected_stats(clicks: list[tuple[str, str, str, str, int]]) -> dict[tuple[Any, ...], Any]:
    groups: dict[tuple[int, str, str], list[tuple[str, str]]] = defaultdict(list)
    for url, gid, uv, ip, at in clicks:
        groups[(at // MINUTE_MS * MINUTE_MS, url, gid)].append((uv, ip))
    return {
        key: (len(v), len({u for u, _ in v}), len({i for _, i in v})) for key, v in groups.items()
    }


def drain(cluster: Cluster, topic: str, count: int) -> list[MessageExt]:
    got: list[MessageExt] = []
    with PullConsumer("cg-" + topic, cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe(topic)
        deadline = time.monotonic() + 60
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} messages"
            got.extend(consumer.poll(timeout=1.0))
    return got


def test_click_stats_match_a_plain_python_count_of_the_same_events(
    spark: Any, cluster: Cluster, tmp_path: Path, run_query: Callable[..., Any]
) -> None:
    clicks = events()
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("ShortLinkStats", 4, 4)
    with Producer("pg-clicks", cluster.namesrv) as producer:
        for c in clicks:
            producer.send(Message("ShortLinkStats", click(*c)))
        # a click 10 minutes on moves the watermark past every minute above
        producer.send(
            Message("ShortLinkStats", click("x/flush", "g0", "u", "ip", BASE_MS + 600_000))
        )

    out = tmp_path / "stats"
    args = click_stats.parser().parse_args(
        [
            *("-n", cluster.namesrv, "--topic", "ShortLinkStats"),
            *("--output", str(out), "--checkpoint", str(tmp_path / "ckpt")),
            *("--out-topic", "ShortLinkMinuteStats", "--watermark", "1 minute"),
        ]
    )
    query = run_query(lambda: click_stats.start(spark, args))
    assert query.exception() is None
    assert not query.isActive

    want = expected_stats(clicks)
    rows = spark.read.parquet(str(out)).collect()
    got = {
        (int(r.window_start.timestamp() * 1000), r.full_short_url, r.gid): (
            r.pv,
            r.uv,
            r.uip,
        )
        for r in rows
    }
    assert len(rows) == len(got)  # each minute once
    assert got == want

    sent = drain(cluster, "ShortLinkMinuteStats", len(want))
    from_topic = {}
    for m in sent:
        doc = json.loads(m.body)
        start = datetime.fromisoformat(doc["window_start"]).replace(tzinfo=UTC)
        key = (int(start.timestamp() * 1000), doc["full_short_url"], doc["gid"])
        from_topic[key] = (doc["pv"], doc["uv"], doc["uip"])
        assert m.keys == [doc["full_short_url"]]
    assert from_topic == want


def test_the_archiver_writes_each_message_once_across_restarts(
    spark: Any, cluster: Cluster, tmp_path: Path, run_query: Callable[..., Any]
) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Orders", 4, 4)
    flags = [
        *("-n", cluster.namesrv, "--topic", "Orders", "--group", "cg-archiver"),
        *("--output", str(tmp_path / "archive"), "--checkpoint", str(tmp_path / "ckpt")),
    ]
    with Producer("pg-orders", cluster.namesrv) as producer:
        for round_ in range(2):
            for i in range(50):
                producer.send(Message("Orders", f"order-{round_}-{i}".encode()))
            query = run_query(lambda: archiver.start(spark, archiver.parser().parse_args(flags)))
            assert query.exception() is None
            assert not query.isActive
    archived = spark.read.parquet(str(tmp_path / "archive"))
    bodies = sorted(bytes(r.body).decode() for r in archived.collect())
    assert bodies == sorted(f"order-{r}-{i}" for r in range(2) for i in range(50))
    assert {r.topic for r in archived.select("topic").collect()} == {"Orders"}


@pytest.mark.parametrize("name", ["click_stats", "archiver"])
def test_pipelines_run_as_modules_and_as_spark_submit_scripts(name: str) -> None:
    script = Path(__file__).parents[1] / "pipelines" / f"{name}.py"
    for cmd in (
        [sys.executable, "-m", f"ferry.spark.pipelines.{name}"],
        [sys.executable, str(script)],
    ):
        done = subprocess.run(
            [*cmd, "--help"], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        assert "--master" in done.stdout
        assert "--checkpoint" in done.stdout
