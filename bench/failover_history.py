"""Failover under a long seeded schedule of faults, checked as a history (Jepsen's way): the
group, traffic and checker of tests/integration/test_failover_history.py (three replicas of
broker-a in controller mode, default broker settings, two producers, a push group and a group
pulling from slaves), for more steps.

    uv run python bench/failover_history.py [--seed N] [--steps 30] [--duration 600]

Prints each step, the figures table, the failover times (fault to the first ack of a send
begun after it) by fault kind, and every broken invariant; exits 1 when one is broken.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

import failover_support
from history_support import failover_summary, run_history, schedule


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="random when not given")
    parser.add_argument("--steps", type=int, default=30, help="faults (each kind once first)")
    parser.add_argument("--duration", type=float, default=0.0, help="s; stop after (0: none)")
    parser.add_argument("--timeout-ms", type=int, default=3000, help="the controller's")
    args = parser.parse_args()
    failover_support.HEARTBEAT_TIMEOUT_MS = args.timeout_ms
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    kinds = ", ".join(s.kind for s in schedule(seed, args.steps))
    print(f"seed {seed} (FERRY_HISTORY_SEED={seed} runs its first steps as the test): {kinds}")
    with tempfile.TemporaryDirectory(prefix="ferry-history-") as tmp:
        history = run_history(Path(tmp), seed, args.steps, args.duration)
    print(history.report())
    print()
    print(failover_summary(history))
    problems = history.violations()
    if problems:
        print()
        print("\n".join(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
