"""The README's Spark example runs as written (in this process, on the tests' session, which
its SparkSession.builder.getOrCreate() picks up)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from itest_support import Cluster

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

README = Path(__file__).parents[2] / "README.md"


def spark_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Spark\n", 1)[1].split("\n## ", 1)[0]
    blocks: list[str] = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_the_readme_spark_example_reads_the_tour_topic_and_writes_it_back(
    spark: Any, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("TourTopic", 4, 4)
    with Producer("tour-producer", cluster.namesrv) as producer:
        for i in range(10):
            producer.send(Message("TourTopic", f"batch {i}".encode(), tags="TagA"))
    monkeypatch.setenv("NAMESRV_ADDR", cluster.namesrv)
    exec(compile(spark_example(), "README.md#spark", "exec"), {})

    got: list[MessageExt] = []
    with PullConsumer("cg-tour-upper", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as c:
        c.subscribe("TourUpper")
        deadline = time.monotonic() + 60
        while len(got) < 10:
            assert time.monotonic() < deadline, f"only {len(got)} messages"
            got.extend(c.poll(timeout=1.0))
    assert sorted(m.body for m in got) == [f"BATCH {i}".encode() for i in range(10)]
    assert {m.tags for m in got} == {"TagA"}
