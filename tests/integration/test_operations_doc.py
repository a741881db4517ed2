"""Every code block of docs/operations.md runs here, against a real cluster, or is marked in the
page with why it cannot (the line before its fence: `<!-- not run by the tests: why -->`), and
is reported as a skip with that reason."""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from itest_support import Cluster

from ferry.client import Admin, Message, Producer
from ferry.runtime.config import BrokerConfig, load_config
from ferry.runtime.testing.cluster import running_cluster

OPERATIONS = Path(__file__).parents[2] / "docs" / "operations.md"
DOC_NAMESRV = "127.0.0.1:9876"
DOC_BROKER = "127.0.0.1:10911"
NOT_RUN = re.compile(r"<!-- not run by the tests: (.+?) -->")
# what the page's Python examples leave to the reader, supplied before them
PRELUDE = "def handle(msg):\n    print('handled', msg.body)\n\n"
# the topics the Python examples use, and SQL92 on (the SimpleConsumer example subscribes with it)
TOPICS = ("Orders", "Audit", "orders", "payments", "price-requests")


@dataclass
class Block:
    line: int  # of the opening fence
    lang: str
    text: str
    not_run: str  # why, from the page's mark; "" when the block runs


def blocks() -> list[Block]:
    found: list[Block] = []
    lines = OPERATIONS.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start = i
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            mark = NOT_RUN.search(lines[start - 1]) if start else None
            text = "\n".join(lines[start + 1 : end]) + "\n"
            found.append(Block(start + 1, lines[start][3:].strip(), text, mark[1] if mark else ""))
            i = end
        i += 1
    return found


def admin_lines(block: Block) -> list[str]:
    return [ln for ln in block.text.splitlines() if ln.startswith(("mqadmin ", "ferry admin "))]


def kind(block: Block) -> str:
    """How this test runs a block: admin (each command line), properties (loaded as a
    broker.conf), python (saved and run as a script)."""
    if block.lang == "sh" and admin_lines(block):
        return "admin"
    if block.lang in ("properties", "python"):
        return block.lang
    return ""


def test_every_block_runs_or_says_why_not() -> None:
    found = blocks()
    assert len(found) >= 9
    for b in found:
        assert kind(b) or b.not_run, f"operations.md:{b.line}: neither run nor marked"
        if kind(b) == "admin":  # every line of an admin block is a command that runs
            assert admin_lines(b) == b.text.strip().splitlines(), f"operations.md:{b.line}"


@pytest.mark.parametrize("block", [b for b in blocks() if b.not_run], ids=lambda b: str(b.line))
def test_blocks_that_cannot_run_here(block: Block) -> None:
    pytest.skip(f"operations.md:{block.line}: {block.not_run}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(
        tmp_path_factory.mktemp("ops-doc"), overrides={"enablePropertyFilter": "true"}
    ) as c:
        with Admin(c.namesrv) as admin:
            for topic in TOPICS:
                admin.create_topic(topic, 4, 4)
        yield c


def test_admin_examples_run(cluster: Cluster) -> None:
    """Every `mqadmin` / `ferry admin` line, in order, in-process (the entry points themselves
    are run by test_cli*.py); the documented addresses become the test cluster's."""
    from typer.testing import CliRunner

    from ferry.cli.admin import app as mqadmin_app
    from ferry.cli.main import app as ferry_app

    commands = [ln for b in blocks() if kind(b) == "admin" for ln in admin_lines(b)]
    assert len(commands) >= 10
    runner = CliRunner()
    for line in commands:
        local = line.replace(DOC_NAMESRV, cluster.namesrv)
        args = shlex.split(local.replace(DOC_BROKER, cluster.broker_addr))
        app = mqadmin_app if args[0] == "mqadmin" else ferry_app
        done = runner.invoke(app, args[1:])
        assert done.exit_code == 0, f"{line}\n{done.output}"


@pytest.mark.parametrize(
    "block", [b for b in blocks() if kind(b) == "properties"], ids=lambda b: str(b.line)
)
def test_properties_blocks_load_as_a_broker_conf(
    block: Block, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each key is one the broker reads, with a value it takes (the addresses name other hosts,
    so the group itself is not started)."""
    conf = tmp_path / "broker.conf"
    conf.write_text(block.text)
    with caplog.at_level(logging.WARNING):
        config = load_config(BrokerConfig, conf, environ={})
    assert "ignoring config keys" not in caplog.text
    assert config.broker_name


@pytest.mark.parametrize(
    "block", [b for b in blocks() if kind(b) == "python"], ids=lambda b: str(b.line)
)
def test_python_blocks_run(block: Block, cluster: Cluster, tmp_path: Path) -> None:
    """Saved as a script (after PRELUDE) and run against the cluster, with one message waiting
    on every topic so that examples that receive get something."""
    with Producer("pg-ops-doc", cluster.namesrv) as producer:
        for topic in TOPICS:
            producer.send(Message(topic, b"from the test", properties={"amount": "500"}))
    script = tmp_path / "example.py"
    script.write_text(PRELUDE + block.text.replace(DOC_NAMESRV, cluster.namesrv))
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"operations.md:{block.line}\n{done.stdout}\n{done.stderr}"
