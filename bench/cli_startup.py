"""How long a `ferry` command takes from spawn to exit (issue 24.6: start-up is import time).

    uv run python bench/cli_startup.py [--runs 15] [--importtime 12]

Each command is a fresh process of the installed `ferry` script, run `--runs` times; the
figures are the median and the spread, in ms. The admin commands run against a local cluster
this script starts (and stops) on free ports. With --importtime N, the N modules whose imports
took longest in one `python -X importtime` run of each command are listed after the table:
where to look next.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Figure, report

from ferry.runtime.launcher import start_local_cluster

FERRY = str(Path(sys.executable).parent / "ferry")
IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def commands(namesrv: str) -> dict[str, list[str]]:
    """What is timed: help (no request), and one-request admin commands."""
    return {
        "ferry --help": ["--help"],
        "ferry admin --help": ["admin", "--help"],
        "ferry admin clusterList": ["admin", "clusterList", "-n", namesrv],
        "ferry admin topicList --json": ["admin", "topicList", "-n", namesrv, "--json"],
    }


def one_run(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([FERRY, *argv], capture_output=True, text=True, check=False)
    spent = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise SystemExit(f"ferry {' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return spent


def import_offenders(argv: list[str], top: int) -> list[tuple[int, str]]:
    """(cumulative µs, module) of the top-level imports that took longest, in one run."""
    code = (
        "import sys; from ferry.cli.main import main; sys.argv = ['ferry', *sys.argv[1:]]; main()"
    )
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    found: list[tuple[int, str]] = []
    for line in done.stderr.splitlines():
        match = IMPORT_LINE.match(line)
        # the root's imports and theirs (deeper ones are inside these figures)
        if match and len(match.group(3)) <= 3:
            found.append((int(match.group(2)), match.group(4)))
    return sorted(found, reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--importtime", type=int, default=0, metavar="N")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        cluster = start_local_cluster(data)
        try:
            todo = commands(cluster.namesrv_addr)
            for argv in todo.values():
                one_run(argv)  # warm the page cache and .pyc files
            figures = [
                Figure(name, "ms", [one_run(argv) for _ in range(args.runs)])
                for name, argv in todo.items()
            ]
            report("cli startup", figures)
            for name, argv in todo.items() if args.importtime else ():
                print(f"\nslowest imports of `{name}` (cumulative ms):")
                for us, module in import_offenders(argv, args.importtime):
                    print(f"  {us / 1000:8.1f}  {module}")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
