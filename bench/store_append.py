"""The store's append path in-process (no sockets): batches of 1 KB records.

uv run python bench/store_append.py [--runs 3] [--messages 200000] [--batch 128]
"""

from __future__ import annotations

import argparse
import tempfile

from common import Figure, repeat, report, timed

from ferry.protocol.record import encode_properties, encode_record
from ferry.runtime.config import BrokerConfig
from ferry.store.store import MessageStore


def one_run(messages: int, batch: int, body_size: int) -> float:
    record = encode_record(b"BenchTopic", b"x" * body_size, encode_properties({"TAGS": "A"}))
    payload = record * batch
    with tempfile.TemporaryDirectory() as root:
        store = MessageStore.open(BrokerConfig(store_path_root_dir=root))
        try:

            def work() -> int:
                for i in range(messages // batch):
                    store.put("BenchTopic", i % 4, batch, payload)
                return (messages // batch) * batch

            return timed(work)
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--body", type=int, default=1024)
    args = parser.parse_args()
    runs = repeat(args.runs, lambda: one_run(args.messages, args.batch, args.body))
    report(
        "store append",
        [Figure(f"MessageStore.put, batch {args.batch} x {args.body} B", "msg/s", runs)],
    )


if __name__ == "__main__":
    main()
