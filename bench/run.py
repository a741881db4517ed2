"""`make bench`: every Ferry benchmark in one run; `--peers` adds the peer comparison
(bench/compare_peers.py, which needs the brokers and the `bench` group: `make bench-peers`)."""

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
    "store_cpu.py",
    "client_throughput.py",
    "push_consumer.py",
    "index_bench.py",
    "spark_read.py",  # needs Java 17+ (PySpark)
    "ha_replication.py",
    "console_traces.py",
    "transactions.py",
    "tracing_cost.py",
    "scheduler_timers.py",
    "new_queues.py",
    "native_loops.py",
    "batch_size.py",
    "transport.py",
    "wakeups.py",  # Redis rows need the `bench` group and redis-server (make bench-peers)
    "e2e_paths.py",
    "handoffs.py",
    "sql_filter.py",
)

args = [a for a in sys.argv[1:] if a != "--peers"]
for script in SCRIPTS:
    print(f"== {script}", flush=True)
    subprocess.run([sys.executable, str(HERE / script), *args], check=True)
if "--peers" in sys.argv[1:]:
    print("== compare_peers.py", flush=True)
    subprocess.run([sys.executable, str(HERE / "compare_peers.py")], check=True)
