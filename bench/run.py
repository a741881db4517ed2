"""`make bench`: every Ferry benchmark in one run (peer brokers come with their own issue)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent

SCRIPTS = (
    "store_append.py",
    "store_flush_throughput.py",
    "store_get_latency.py",
    "store_recovery.py",
    "client_throughput.py",
    "push_consumer.py",
    "index_bench.py",
)

for script in SCRIPTS:
    print(f"== {script}", flush=True)
    subprocess.run([sys.executable, str(HERE / script), *sys.argv[1:]], check=True)
