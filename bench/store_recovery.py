"""Start-up time of the store after kill -9 (recovery verifies the log) and after a clean stop.

    uv run python bench/store_recovery.py [--runs 3] [--mib 512] [--queues 8]

Each run fills a fresh store process with `mib` MiB of 1 KB records (batches of 128 over
`queues` queues) with no flush at all (flushIntervalCommitLog huge: no checkpoint), so a
restart after kill -9 must verify every record (layout, CRC, offset) and rebuild nothing it
need not; the figure is scaled to one GiB. Then a clean stop and a start again, which verifies
nothing. Times are the store's own "files loaded and checked" figure and the time until its
READY line (process start and imports included).
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time

from common import Figure, report
from store_flush_throughput import Senders, start_store

from ferry.protocol.messages import StorePutRequest
from ferry.protocol.record import encode_properties, encode_record

GiB = 1 << 30
NO_FLUSH = {"flushIntervalCommitLog": str(10**9), "flushIntervalConsumeQueue": str(10**9)}
CHECKED = re.compile(r"files loaded and checked in (\d+) ms")


def fill(endpoint: str, mib: int, queues: int, batch: int = 128) -> int:
    payload = encode_record(b"Recover", b"r" * 1024, encode_properties({"TAGS": "A"})) * batch
    puts = mib * (1 << 20) // len(payload)
    client = Senders(endpoint, 8)
    try:
        sent = done = 0
        for sock in client.socks:
            client.put(sock, StorePutRequest("Recover", sent % queues, batch), payload)
            sent += 1
        while done < puts:
            for sock, _body in client.replies(10_000):
                done += 1
                if sent < puts:
                    client.put(sock, StorePutRequest("Recover", sent % queues, batch), payload)
                    sent += 1
        return client.status().max_offset
    finally:
        client.close()


def checked_ms(output: str) -> float:
    found = CHECKED.findall(output)
    if not found:
        raise RuntimeError(f"no recovery line in the store's output:\n{output}")
    return float(found[-1])


def one_run(mib: int, queues: int) -> tuple[float, float, float, float, int]:
    """(crash check ms, crash ready s, clean check ms, clean ready s, bytes)"""
    with tempfile.TemporaryDirectory() as root:
        sp = start_store(root, "ASYNC_FLUSH", NO_FLUSH)
        size = fill(sp.endpoints["endpoint"], mib, queues)
        sp.kill()
        started = time.monotonic()
        sp = start_store(root, "ASYNC_FLUSH", NO_FLUSH)
        crash_ready = time.monotonic() - started
        crash_ms = checked_ms(sp.recent_output())
        sp.stop()
        started = time.monotonic()
        sp = start_store(root, "ASYNC_FLUSH", NO_FLUSH)
        clean_ready = time.monotonic() - started
        clean_ms = checked_ms(sp.recent_output())
        sp.stop()
    return crash_ms, crash_ready, clean_ms, clean_ready, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--queues", type=int, default=8)
    args = parser.parse_args()
    runs = [one_run(args.mib, args.queues) for _ in range(args.runs)]
    per_gib = [GiB / size for *_, size in runs]
    report(
        "store recovery",
        [
            Figure(
                "after kill -9: verify + rebuild, per GiB of log",
                "ms",
                [ms * k for (ms, *_), k in zip(runs, per_gib, strict=True)],
            ),
            Figure(
                f"after kill -9: start to READY ({args.mib} MiB)",
                "ms",
                [r[1] * 1000 for r in runs],
            ),
            Figure(
                f"after a clean stop: files loaded ({args.mib} MiB)", "ms", [r[2] for r in runs]
            ),
            Figure(
                f"after a clean stop: start to READY ({args.mib} MiB)",
                "ms",
                [r[3] * 1000 for r in runs],
            ),
        ],
    )


if __name__ == "__main__":
    main()
