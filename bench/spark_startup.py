"""How long spark/README.md's batch read takes to show its first rows, step by step.

    uv run python bench/spark_startup.py [--runs 3] [--messages 50]

Each run is a fresh Python process (a session's cost is paid once per process) that runs the
README's code block as written, one top-level statement at a time, against a local cluster
holding `--messages` messages in each of Orders and Payments (4 queues each). Figures: the
imports, the session start (getOrCreate), register(), the read up to the rows shown (load and
show), register to first rows (the last two together), the whole process, spawn to exit, and the CPU
time its processes (Python, the JVM, Spark's Python workers) used up to the rows shown.
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
TITLES = {
    "cpu session": "CPU, session",
    "cpu register to first rows": "CPU, register to first rows",
    "cpu": "CPU, all its processes, to the rows",
    "cpu jvm": "CPU, the JVM",
    "cpu workers": "CPU, Spark's Python workers",
}


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
    """Runs the README's block statement by statement; prints the seconds (wall and CPU of
    all its processes) each phase took, and the CPU by kind of process at the end."""
    code = readme_example()
    spent: dict[str, float] = {}
    scope: dict[str, object] = {"__name__": "__main__"}
    for stmt in ast.parse(code).body:
        source = ast.get_source_segment(code, stmt) or ""
        phase = phase_of(stmt, source)
        started, cpu = time.perf_counter(), tree_cpu_seconds(os.getpid())["cpu"]
        exec(compile(ast.Module([stmt], []), str(README), "exec"), scope)
        spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - started
        cpu = tree_cpu_seconds(os.getpid())["cpu"] - cpu
        spent[f"cpu {phase}"] = spent.get(f"cpu {phase}", 0.0) + cpu
    spent.update(tree_cpu_seconds(os.getpid()))
    sys.stdout.flush()
    print(MARK + json.dumps(spent), flush=True)


def tree_cpu_seconds(root: int) -> dict[str, float]:
    """CPU time (user + system) of root and every process under it, what they reaped
    included, by kind: the JVM, Spark's Python workers (under the JVM), all together. Less
    swayed by other load on the machine than wall time."""
    stats: dict[int, tuple[str, list[str]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            name, _, rest = text.partition(" (")[2].rpartition(") ")
            stats[int(entry.name)] = (name, rest.split())
    children: dict[int, list[int]] = {}
    for pid, (_, fields) in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)  # fields[1]: the parent's pid
    ticks = {"cpu": 0, "cpu jvm": 0, "cpu workers": 0}
    todo = [(root, "driver")]
    while todo:
        pid, kind = todo.pop()
        name, fields = stats.get(pid, ("", []))
        if kind == "driver" and pid != root and name == "java":
            kind = "jvm"
        used = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        ticks["cpu"] += used
        if kind == "jvm":
            ticks["cpu jvm" if name == "java" else "cpu workers"] += used
        todo.extend((child, kind) for child in children.get(pid, []))
    return {k: v / os.sysconf("SC_CLK_TCK") for k, v in ticks.items()}


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
    rows = [line for line in lines if re.match(r"\|\s*(Orders|Payments)\s*\|", line)]
    assert len(rows) == min(20, 2 * messages), done.stdout  # show() prints 20 rows
    spent: dict[str, float] = json.loads(lines[-1].removeprefix(MARK))
    spent["register to first rows"] = spent["register"] + spent["read"]
    spent["cpu register to first rows"] = spent["cpu register"] + spent["cpu read"]
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

    from ferry.admin import Admin
    from ferry.client import Message, Producer
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
    names += ["process, spawn to exit", "cpu session", "cpu register to first rows"]
    names += ["cpu", "cpu jvm", "cpu workers"]
    report("spark startup", [Figure(TITLES.get(n, n), "s", [r[n] for r in runs]) for n in names])


if __name__ == "__main__":
    main()
