"""How long spark/README.md's batch read takes to show its first rows, step by step.

    uv run python bench/spark_startup.py [--runs 3] [--messages 50]

Each run is a fresh Python process (a session's cost is paid once per process) that runs the
README's code block as written, one top-level statement at a time, against a local cluster
holding `--messages` messages in each of Orders and Payments (4 queues each). Figures: the
imports, the session start (getOrCreate), register(), the read up to the rows shown (load and
show), register to first rows (the last two together) and the whole process, spawn to exit.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

README = Path(__file__).parents[1] / "spark" / "README.md"
MARK = "PHASES "


def readme_example() -> str:
    found = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert found is not None, f"no python block in {README}"
    return found.group(1)


def phase_of(stmt: ast.stmt, source: str) -> str:
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return "imports"
    if "getOrCreate" in source:
        return "session"
    if ".register(" in source:
        return "register"
    return "read"


def child() -> None:
    """Runs the README's block statement by statement; prints seconds per phase."""
    code = readme_example()
    spent: dict[str, float] = {}
    scope: dict[str, object] = {"__name__": "__main__"}
    for stmt in ast.parse(code).body:
        source = ast.get_source_segment(code, stmt) or ""
        started = time.perf_counter()
        exec(compile(ast.Module([stmt], []), str(README), "exec"), scope)
        phase = phase_of(stmt, source)
        spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - started
    sys.stdout.flush()
    print(MARK + json.dumps(spent), flush=True)


def one_run(env: dict[str, str], messages: int) -> dict[str, float]:
    started = time.perf_counter()
    command = [sys.executable, __file__, "--child"]
    done = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=600
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the README example failed:\n{done.stdout}\n{done.stderr[-4000:]}")
    lines = done.stdout.splitlines()
    rows = [line for line in lines if re.match(r"\|(Orders|Payments)\s*\|", line)]
    assert len(rows) == min(20, 2 * messages), done.stdout  # show() prints 20 rows
    spent: dict[str, float] = json.loads(lines[-1].removeprefix(MARK))
    spent["register to first rows"] = spent["register"] + spent["read"]
    spent["process, spawn to exit"] = wall
    return spent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=50, help="per topic")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return

    from common import Figure, report

    from ferry.client import Admin, Message, Producer
    from ferry.runtime.launcher import start_local_cluster

    with tempfile.TemporaryDirectory(prefix="ferry-bench-") as data:
        cluster = start_local_cluster(data)
        try:
            namesrv = cluster.namesrv_addr
            with Admin(namesrv) as admin, Producer("bench-spark-startup", namesrv) as producer:
                for topic in ("Orders", "Payments"):
                    admin.create_topic(topic, 4, 4)
                    for i in range(args.messages):
                        producer.send(Message(topic, f"{topic} {i}".encode()))
            env = dict(os.environ, NAMESRV_ADDR=namesrv)
            runs = [one_run(env, args.messages) for _ in range(args.runs)]
        finally:
            cluster.stop()
    names = ["imports", "session", "register", "read", "register to first rows"]
    names.append("process, spawn to exit")
    report(
        "spark startup",
        [Figure(name, "s", [run[name] for run in runs]) for name in names],
    )


if __name__ == "__main__":
    main()
