"""How long a read waits at the store while SYNC_FLUSH producers keep the disk busy.

    uv run python bench/store_get_latency.py [--runs 3] [--samples 2000] [--senders 8]
        [--batch 8] [--mode SYNC_FLUSH]

A broker-store process; a thread drives `senders` DEALERs putting batches of 1 KB records
without pause; meanwhile the main thread times StoreGetRequests (one record) one after the
other. With the fsync on the service loop every read waits for the fsync in progress; with
group commit on the flush thread it does not.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import threading
import time
from typing import Any

import zmq
from common import Figure, percentile, report
from store_flush_throughput import Senders, start_store

from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import StoreGetReply, StoreGetRequest, StorePutRequest
from ferry.protocol.record import encode_record


def load(endpoint: str, senders: int, batch: int, stop: threading.Event) -> None:
    payload = encode_record(b"Load", b"x" * 1024, b"") * batch
    client = Senders(endpoint, senders)
    try:
        for sock in client.socks:
            client.put(sock, StorePutRequest("Load", 0, batch), payload)
        while not stop.is_set():
            for sock, _body in client.replies(200):
                client.put(sock, StorePutRequest("Load", 0, batch), payload)
    finally:
        client.close()


def one_run(mode: str, samples: int, senders: int, batch: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as root:
        sp = start_store(root, mode)
        stop = threading.Event()
        loader = threading.Thread(
            target=load, args=(sp.endpoints["endpoint"], senders, batch, stop), daemon=True
        )
        ctx: zmq.Context[Any] = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(sp.endpoints["endpoint"])
        codec = RequestCodec()
        ids = itertools.count(1)
        try:
            loader.start()
            time.sleep(0.5)  # let the load reach its pace
            waits = []
            for _ in range(samples):
                started = time.perf_counter()
                env = RequestEnvelope(next(ids), StoreGetRequest("Load", 0, 0, max_msgs=1))
                sock.send_multipart(codec.request_frames(env, None))
                if not sock.poll(10_000):
                    raise TimeoutError("no reply to a get")
                reply, _ = codec.decode_reply(sock.recv_multipart()[1:])
                waits.append((time.perf_counter() - started) * 1e6)
                assert isinstance(reply.body, StoreGetReply), reply.body
        finally:
            stop.set()
            loader.join(10)
            ctx.destroy(linger=0)
            sp.stop()
    return percentile(waits, 0.5), percentile(waits, 0.99)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--mode", default="SYNC_FLUSH")
    args = parser.parse_args()
    runs = [one_run(args.mode, args.samples, args.senders, args.batch) for _ in range(args.runs)]
    what = f"get under {args.mode} load ({args.senders} senders x {args.batch} x 1 KB)"
    report(
        "store get latency",
        [
            Figure(f"{what}, p50", "us", [p50 for p50, _ in runs]),
            Figure(f"{what}, p99", "us", [p99 for _, p99 in runs]),
        ],
    )


if __name__ == "__main__":
    main()
