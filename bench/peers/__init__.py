"""Ferry against the brokers a Python shop would install instead (issue 13), in one run.

servers: starts and stops the brokers (loopback, free ports, temp dirs, stopped by pid).
ferry_side, redis_side, nats_side, rabbit_side: one driver per system, same workloads.
report: the tables, the targets and the JSON of a run. Entry point: bench/compare_peers.py.
"""
