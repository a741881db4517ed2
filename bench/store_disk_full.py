"""What a full disk costs a put, in-process on a small tmpfs (needs root to mount it).

    uv run --frozen --all-packages python bench/store_disk_full.py [--runs 5] [--puts 2000]

Figures: a put that is stored (SYNC-less, one 1 KB record), a put refused by the ratio guard
(above diskSpaceWarningLevelRatio), and a put refused because the disk has no room for the
next CommitLog segment (the segment file is created, its allocation fails, it is removed).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from common import Figure, report

from ferry.protocol.errors import DiskFullError
from ferry.protocol.record import encode_properties, encode_record
from ferry.runtime.config import BrokerConfig
from ferry.runtime.testing.small_disk import small_disk
from ferry.store.store import MessageStore

DISK = 16 * 1024 * 1024
RECORD = encode_record(b"Full", b"x" * 1024, encode_properties({"TAGS": "A"}))


def fill(disk: Path, leave: int) -> None:
    fd = os.open(disk / "filler", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        st = os.statvfs(disk)
        grow = st.f_bavail * st.f_frsize - leave
        if grow > 0:
            os.posix_fallocate(fd, os.fstat(fd).st_size, grow)
    finally:
        os.close(fd)


def per_put_us(store: MessageStore, puts: int, refused: bool) -> float:
    started = time.perf_counter()
    for _ in range(puts):
        try:
            store.put("Full", 0, 1, RECORD)
        except DiskFullError:
            if not refused:
                raise
        else:
            if refused:
                raise RuntimeError("a put was stored on a full disk")
    return (time.perf_counter() - started) / puts * 1e6


def one_run(puts: int, guard: bool) -> tuple[float, float]:
    """(µs per stored put, µs per refused put)."""
    with tempfile.TemporaryDirectory() as tmp, small_disk(Path(tmp) / "disk", DISK) as why:
        if why:
            raise SystemExit(f"cannot mount a tmpfs here (needs root): {why}")
        disk = Path(tmp) / "disk"
        config = BrokerConfig(
            store_path_root_dir=str(disk / "store"),
            mapped_file_size_commit_log=4 * 1024 * 1024,
            disk_space_warning_level_ratio=60 if guard else 99,
        )
        with MessageStore.open(config) as store:
            stored = per_put_us(store, puts, refused=False)
            if guard:
                fill(disk, int(DISK * 0.3))
                store.retention.check_disk()  # what the 1 s timer does
            else:
                fill(disk, 1024 * 1024)  # under a segment, over 1% (the guard stays quiet)
                try:  # fill the segment being written: the next put needs a new one
                    while True:
                        store.put("Full", 0, 1, RECORD)
                except DiskFullError:
                    pass
            refused = per_put_us(store, puts, refused=True)
            os.unlink(disk / "filler")
            return stored, refused


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--puts", type=int, default=2000)
    args = parser.parse_args()
    results = {guard: [one_run(args.puts, guard) for _ in range(args.runs)] for guard in (1, 0)}
    report(
        "store on a full disk",
        [
            Figure("put stored, 1 KB", "µs", [r[0] for r in results[1] + results[0]]),
            Figure("put refused by the ratio guard", "µs", [r[1] for r in results[1]]),
            Figure("put refused: no room for a segment", "µs", [r[1] for r in results[0]]),
        ],
    )


if __name__ == "__main__":
    main()
