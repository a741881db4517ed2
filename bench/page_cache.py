"""What a CommitLog append pays for page-cache memory on this machine, outside Ferry.

    python bench/page_cache.py [--mib 512] [--idle 30]

Appends 256 x 1.2 KB batches with pwrite into a preallocated file (as the store does), four
ways, and prints CPU µs per 4 KiB page and per 1.2 KB message:
1. into free memory the kernel has not used lately;
2. into pages freed a moment ago (the first file deleted just before);
3. into pages freed `--idle` seconds ago (the second file deleted, then a wait);
4. as 3, paced at ~360 MB/s (300k msg/s), with a thread keeping the page cache populated
   32 MiB ahead of the writer (posix_fadvise WILLNEED on the preallocated range), the
   pre-touching RocketMQ's warmMapedFileEnable does at file creation.
On a VM whose balloon reports free pages to the host, memory freed a while ago comes back
cold: each page costs a trip to the hypervisor when it is touched again.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

BATCH = 256 * 1200
PAGE = 4096
AHEAD = 32 << 20
STEP = 1 << 20


def balloon_reports_free_pages() -> str:
    """Whether a virtio balloon with free page reporting (feature bit 5) is present."""
    for dev in Path("/sys/bus/virtio/devices").glob("*"):
        try:
            if int((dev / "device").read_text(), 16) == 5:
                bits = (dev / "features").read_text().strip()
                return "yes" if len(bits) > 5 and bits[5] == "1" else "no"
        except (OSError, ValueError):
            continue
    return "no balloon"


def append(path: Path, size: int, paced_s: float = 0.0, warm: bool = False) -> tuple[float, float]:
    """(writer CPU s, warmer CPU s) to append `size` bytes in batches."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, size)
    data = os.urandom(BATCH)
    state = {"pos": 0, "stop": False, "warm_cpu": 0.0}
    wake = threading.Event()

    def warmer() -> None:
        done = 0
        started = time.thread_time()
        while not state["stop"]:
            while done < min(int(state["pos"]) + AHEAD, size):
                os.posix_fadvise(fd, done, STEP, os.POSIX_FADV_WILLNEED)
                done += STEP
            wake.wait(0.05)
            wake.clear()
        state["warm_cpu"] = time.thread_time() - started

    helper = threading.Thread(target=warmer) if warm else None
    if helper:
        helper.start()
    started = time.thread_time()
    next_at = time.perf_counter()
    pos = 0
    while pos + BATCH <= size:
        if paced_s:
            ahead = next_at - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)  # wait-ok: pacing the writer as a loaded store would be
            next_at += paced_s
        os.pwrite(fd, data, pos)
        pos += BATCH
        state["pos"] = pos
        if pos % STEP < BATCH:
            wake.set()
    writer = time.thread_time() - started
    state["stop"] = True
    wake.set()
    if helper:
        helper.join()
    os.close(fd)
    return writer, float(state["warm_cpu"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--idle", type=float, default=30.0)
    args = parser.parse_args()
    size = args.mib << 20
    pages = size // PAGE
    msgs = size // 1200
    rows = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        d = Path(tmp)
        rows.append(("free memory not used lately", *append(d / "a", size)))
        (d / "a").unlink()
        rows.append(("pages freed a moment ago", *append(d / "b", size)))
        (d / "b").unlink()
        time.sleep(args.idle)  # wait-ok: the point of the measurement is the idle time
        rows.append((f"pages freed {args.idle:.0f} s ago", *append(d / "c", size)))
        (d / "c").unlink()
        time.sleep(args.idle)  # wait-ok: as above
        rows.append(
            (
                f"pages freed {args.idle:.0f} s ago, paced, warmer thread",
                *append(d / "d", size, paced_s=BATCH / 360e6, warm=True),
            )
        )
    print(
        f"\n# page_cache {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{args.mib} MiB per file, balloon free page reporting: {balloon_reports_free_pages()}"
    )
    print("| appends into | writer µs/page | writer µs/msg | warmer µs/msg | total µs/msg |")
    print("|---|---|---|---|---|")
    for name, writer, warmer in rows:
        print(
            f"| {name} | {1e6 * writer / pages:.2f} | {1e6 * writer / msgs:.2f} "
            f"| {1e6 * warmer / msgs:.2f} | {1e6 * (writer + warmer) / msgs:.2f} |"
        )


if __name__ == "__main__":
    main()
