"""`make bench`: every Ferry benchmark in one run (peer brokers come with their own issue)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent

for script in ("store_append.py", "client_throughput.py", "push_consumer.py", "index_bench.py"):
    print(f"== {script}", flush=True)
    subprocess.run([sys.executable, str(HERE / script), *sys.argv[1:]], check=True)
