"""The per-record loops in-process, C (ferry.native) against their Python references, on
batches of 128 x 1 KB records: µs per record (per 128 KiB batch for the CRC).

    uv run --frozen --all-packages python bench/native_loops.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib
from collections.abc import Callable

from ferry import native
from ferry.client import message_decode, message_encode, outgoing
from ferry.client.message import Message, MessageQueue, PlainMessage, SendResult, SendStatus
from ferry.index import keys
from ferry.protocol import record
from ferry.store import batch

N = 128
TOPIC = b"BenchTopic"


def per_call(fn: Callable[[], object], calls: int = 300) -> float:
    """Seconds per call, the best of 5 runs of `calls` calls."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def stored_batch() -> bytes:
    """N records as the store keeps them (offsets and store time filled in)."""
    out = bytearray()
    for i in range(N):
        props = record.encode_properties({"TAGS": "TagA", "UNIQ_KEY": f"{i:032X}"})
        raw = bytearray(record.encode_record(TOPIC, bytes(1024), props))
        record.OFFSETS.pack_into(raw, record.OFF_OFFSETS, i, len(out))
        record.STORE_STAMP.pack_into(raw, record.OFF_STORE_STAMP, 1, bytes(8))
        out += raw
    return bytes(out)


def one_run() -> dict[str, float]:
    put = b"".join(
        record.encode_record(TOPIC, bytes(1024), record.encode_properties({"TAGS": "TagA"}))
        for _ in range(N)
    )
    log = stored_batch()
    plain = [PlainMessage(bytes(1024), "", "", 0) for _ in range(N)]
    ids = [f"{i:032X}" for i in range(N)]
    host = bytes(8)
    msgs = [Message("BenchTopic", bytes(1024), tags="TagA") for _ in range(N)]
    tail = len(record.topic_tail("BenchTopic"))
    phys = [i * 1100 for i in range(N)]
    queue = MessageQueue("BenchTopic", "b", 0)
    limits = (4 << 20, 1 << 30)
    loops: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "store batch scan": (
            lambda: native.scan_batch(put, N, TOPIC, *limits, record.tags_code),
            lambda: batch.scan_batch_py(put, N, TOPIC, *limits),
        ),
        "index key scan": (
            lambda: native.indexed_records(log),
            lambda: keys.indexed_records_py(log),
        ),
        "SDK plain-batch encode": (
            lambda: native.encode_plain_batch(
                record.topic_tail("BenchTopic"), plain, ids, 1, host, -1
            ),
            lambda: message_encode.encode_plain_batch_py(
                "BenchTopic", plain, ids, born_timestamp=1, born_host=host
            ),
        ),
        "consumer decode": (
            lambda: message_decode.decode_records(log, "b", None, []),
            lambda: message_decode.decode_records_py(log, "b", None, []),
        ),
        "SDK plain messages of a batch": (
            lambda: message_encode.plain_messages(msgs, "BenchTopic", tail),
            lambda: [message_encode.plain_message_py(m, tail) for m in msgs],
        ),
        "SDK send_async results": (
            lambda: native.send_results(SendResult, SendStatus.SEND_OK, ids, phys, "AB", queue, 0),
            lambda: outgoing.each_result_py(ids, phys, SendStatus.SEND_OK, "AB", queue, 0),
        ),
        "SDK send_batch offset ids, joined": (
            lambda: native.joined_offset_ids("7F00000100002A9F", phys),
            lambda: ",".join([f"7F00000100002A9F{p:016X}" for p in phys]),
        ),
    }
    out: dict[str, float] = {}
    for name, (c_fn, py_fn) in loops.items():
        out[f"{name}, C"] = per_call(c_fn) / N * 1e6
        out[f"{name}, Python"] = per_call(py_fn) / N * 1e6
    out["CRC-32 of 128 KiB, C (folded with PCLMULQDQ)"] = per_call(lambda: native.crc32(log)) * 1e6
    out["CRC-32 of 128 KiB, zlib.crc32"] = per_call(lambda: zlib.crc32(log)) * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not native.ENABLED:
        raise SystemExit("ferry.native is not built or FERRY_NATIVE=0: nothing to compare")
    runs = [one_run() for _ in range(args.runs)]
    print(f"| loop | median | spread | unit |  ({args.runs} runs, best of 5 x 300 calls each)")
    print("|---|---|---|---|")
    for name in runs[0]:
        values = [r[name] for r in runs]
        unit = "µs per 128 KiB" if "CRC" in name else "µs per record"
        print(
            f"| {name} | {statistics.median(values):.2f} | "
            f"{min(values):.2f}-{max(values):.2f} | {unit} |"
        )


if __name__ == "__main__":
    main()
