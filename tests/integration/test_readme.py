"""Every example in the README runs, against a real cluster."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from itest_support import Cluster, start_cluster, wait_for

from ferry.admin import Admin
from ferry.client import Message as FerryMessage
from ferry.client import Producer as FerryProducer
from ferry.runtime.testing.client_venvs import rocketmq_remoting_python

README = Path(__file__).parents[2] / "README.md"
BIN = Path(sys.executable).parent


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def run_tour(namesrv: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The tour as written: its `uv run ferry admin` lines, then its Python saved as tour.py
    and run; the documented name server address becomes `namesrv`."""
    env = {**os.environ, "NAMESRV_ADDR": namesrv}
    commands = [
        ln
        for block in _blocks("sh")
        for ln in block.splitlines()
        if ln.startswith("uv run ferry admin")
    ]
    assert len(commands) >= 4
    for line in commands:
        args = line.split("#")[0].replace("127.0.0.1:9876", namesrv).split()[2:]
        args[0] = str(BIN / args[0])
        done = subprocess.run(
            args, capture_output=True, text=True, env=env, timeout=60, check=False
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    python_block = _blocks("python")[0]  # the tour; spark/tests runs the Spark example
    script = tmp_path / "tour.py"
    script.write_text(python_block)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_readme_tour_runs(cluster: Cluster, tmp_path: Path) -> None:
    done = run_tour(cluster.namesrv, tmp_path)
    assert "SEND_OK" in done.stdout
    assert "TagA b'hello ferry' eu" in done.stdout  # its user property came back
    assert done.stdout.count("b'batch ") == 10
    assert "pushed TagA b'hello ferry'" in done.stdout
    assert "pushed None" not in done.stdout  # the tag filter holds


def test_readme_asyncio_example_runs(cluster: Cluster, tmp_path: Path) -> None:
    """The README's asyncio section, saved as tour_aio.py and run as written."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## asyncio", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, re.S)
    script = tmp_path / "tour_aio.py"
    script.write_text(block)
    env = {**os.environ, "NAMESRV_ADDR": cluster.namesrv}
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("SEND_OK ")
    assert "consumed 101" in done.stdout


def test_readme_rocketmq_client_example_runs_with_the_real_client(tmp_path: Path) -> None:
    """The README's RocketMQ section, run as written by Apache's `rocketmq` 0.4.4 client (in a
    venv of its own) against a cluster's RocketMQ door; Ferry's SDK then reads the message."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## RocketMQ's own clients", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, re.S)
    script = tmp_path / "rocketmq_tour.py"
    script.write_text(block)
    c = start_cluster(tmp_path / "cluster", rocketmq_port=0)
    try:
        with FerryProducer("pg-readme", c.namesrv) as producer:  # the tour's topic exists
            producer.send(FerryMessage("TourTopic", b"first"))
        env = {**os.environ, "ROCKETMQ_NAMESRV_ADDR": c.local.rocketmq_addr}
        done = subprocess.run(
            [str(rocketmq_remoting_python()), str(script)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        status, msg_id = done.stdout.split()[-2:]
        assert status == "0"  # SendStatus.OK
        with Admin(c.namesrv) as admin:  # the index follows the log: found once it caught up
            [found] = wait_for(
                lambda: admin.query_msg_by_key("TourTopic", "order-rocketmq"), 10, "the key"
            )
        assert found.msg_id == msg_id
        assert found.body == b"hello from a RocketMQ client"
        assert found.tags == "TagA"
    finally:
        c.local.stop()
