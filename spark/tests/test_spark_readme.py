"""spark/README.md's batch read, run as written as a script by the project's Python while the
`python3` on PATH is another interpreter, one without ferry: register() must have the source's
workers run the driver's interpreter. Also who picks the interpreter, on the tests' session."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from itest_support import Cluster

import ferry.spark
from ferry.admin import Admin
from ferry.client import Message, Producer

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

README = Path(__file__).parents[1] / "README.md"
ROW = re.compile(r"^\|\s*(\w+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|(.*)\|$")  # topic, queue, offset, body


def readme_example() -> str:
    blocks: list[str] = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, "the test runs the README's one python block"
    return blocks[0]


def python_without_ferry() -> str:
    """An interpreter that cannot import ferry: the system's, or the one the venv was made from
    (run by its own path it does not see the venv's packages)."""
    for candidate in ("/usr/bin/python3", os.path.realpath(sys.executable)):
        probe = [candidate, "-c", "import ferry"]
        if (
            os.path.exists(candidate)
            and subprocess.run(probe, check=False, stderr=subprocess.DEVNULL).returncode
        ):
            return candidate
    pytest.fail("no interpreter without ferry on this machine to put first on PATH")


def test_the_readme_batch_read_runs_as_a_script_with_another_python3_on_path(
    cluster: Cluster, tmp_path: Path
) -> None:
    with Admin(cluster.namesrv) as admin, Producer("readme-producer", cluster.namesrv) as producer:
        for topic in ("Orders", "Payments"):
            admin.create_topic(topic, 4, 4)
            for i in range(3):
                producer.send(Message(topic, f"{topic.lower()} {i}".encode()))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(python_without_ferry())
    script = tmp_path / "readme_batch_read.py"
    script.write_text(readme_example(), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["NAMESRV_ADDR"] = cluster.namesrv

    done = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )

    assert done.returncode == 0, done.stderr[-6000:]
    rows = [m.groups() for line in done.stdout.splitlines() if (m := ROW.match(line))]
    shown = sorted((topic, body.strip()) for topic, _, _, body in rows)
    assert shown == [("Orders", f"orders {i}") for i in range(3)] + [
        ("Payments", f"payments {i}") for i in range(3)
    ], done.stdout
    per_queue: dict[tuple[str, str], list[int]] = {}
    for topic, queue, offset, _ in rows:
        per_queue.setdefault((topic, queue), []).append(int(offset))
    assert all(sorted(o) == list(range(len(o))) for o in per_queue.values()), per_queue


def test_the_workers_run_the_users_python_when_chosen_else_this_one(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = spark.sparkContext
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert ferry.spark.worker_python(sc) == sys.executable  # a local[2] master
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/chosen/python")
    assert ferry.spark.worker_python(sc) == "/opt/chosen/python"


def test_register_on_a_running_session_sets_the_sources_python_and_no_one_elses(
    spark: Any, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session was made with another interpreter in mind (here one that does not exist):
    the source's workers run this one anyway, and the context keeps its own choice."""
    with Admin(cluster.namesrv) as admin, Producer("readme-producer", cluster.namesrv) as producer:
        admin.create_topic("LateRegister", 2, 2)
        producer.send(Message("LateRegister", b"late"))
    sc = spark.sparkContext
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setattr(sc, "pythonExec", "/nonexistent/python3")  # undone after the test
    ferry.spark.register(spark)
    assert sc.pythonExec == "/nonexistent/python3"
    df = spark.read.format("ferry").option("ferry.namesrv", cluster.namesrv)
    rows = df.option("subscribe", "LateRegister").load().select("body").collect()
    assert [r.body for r in rows] == [b"late"]
