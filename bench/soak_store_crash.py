"""Soak: kill -9 the store again and again under SYNC_FLUSH traffic and check every round that
each acknowledged message is served intact, exactly once (tests/integration/test_store_crash.py
runs 20 rounds of the same in CI).

    uv run python bench/soak_store_crash.py [--rounds 300] [--producers 4] [--seed N]
        [--flush SYNC_FLUSH|ASYNC_FLUSH] [--verify-every 1]

Prints one line per round and a summary: rounds, acknowledged and stored messages, how many
restarts found a torn tail to cut, time per round. Exits 1 at the first failed check (the
store's files are kept in the printed directory).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from store_crash_support import CrashRig


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("producers got no acknowledgements in time")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--flush", default="SYNC_FLUSH")
    parser.add_argument("--verify-every", type=int, default=1)
    args = parser.parse_args()
    seed = args.seed or time.time_ns()
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="ferry-soak-"))
    print(f"seed {seed}, store in {root}", flush=True)
    rig = CrashRig(root / "broker", flush_disk_type=args.flush, producers=args.producers)
    rig.start()
    torn = 0
    started = time.monotonic()
    try:
        for n in range(1, args.rounds + 1):
            rig.crash_round(rng, wait_until)
            cut = any("torn or corrupt" in line for line in rig.store.output)
            torn += cut
            if n % args.verify_every == 0 or n == args.rounds:
                stored = rig.verify()
                print(
                    f"round {n}: {len(rig.acked)} acknowledged, {stored} stored, "
                    f"{'torn tail cut' if cut else 'clean tail'}",
                    flush=True,
                )
    except AssertionError as exc:
        print(f"FAILED after {rig.rounds} kills (seed {seed}): {exc}", flush=True)
        rig.close()
        sys.exit(1)
    rig.close()
    shutil.rmtree(root)
    took = time.monotonic() - started
    print(
        f"\n{args.rounds} kill -9 rounds ({args.flush}, {args.producers} producers): "
        f"{len(rig.acked)} acknowledged messages all served intact and once; "
        f"{torn} restarts cut a torn tail; {took / args.rounds:.2f} s per round",
        flush=True,
    )


if __name__ == "__main__":
    main()
