"""Append throughput through the store's socket under ASYNC_FLUSH and SYNC_FLUSH.

    uv run python bench/store_flush_throughput.py [--runs 3] [--messages 100000] [--batch 128]
        [--senders 1,8,64] [--modes ASYNC_FLUSH,SYNC_FLUSH] [--topics 1]

A broker-store process (started by the launcher, as in production) on a fresh directory per
run; one client thread drives N DEALER sockets ("senders"), each keeping one put of `batch`
1 KB records in flight. A put is counted when its reply arrives (SYNC_FLUSH: once the records
are on disk). With --topics > 1 each put goes to the next topic in turn (4 queues each).
Also reports the store process's CPU time per message (every thread), which tells a loop woken
once per put from one that takes several puts per wake-up.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from typing import Any

import zmq
from common import Figure, report
from store_cpu import cpu_seconds

from ferry.protocol.codes import SendStatus
from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import StorePutReply, StorePutRequest, StoreStatusReply
from ferry.protocol.messages import StoreStatusRequest as Status
from ferry.protocol.record import encode_properties, encode_record
from ferry.runtime.launcher import ServiceProcess
from ferry.runtime.testing import store as testing_store

QUEUES_PER_TOPIC = 4


def start_store(root: str, mode: str, extra: dict[str, str] | None = None) -> ServiceProcess:
    return testing_store.start_store(root, flushDiskType=mode, **(extra or {}))


class Senders:
    """N DEALER sockets on one thread, each with one put in flight."""

    def __init__(self, endpoint: str, count: int) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.codec = RequestCodec()
        self.socks = []
        self.poller = zmq.Poller()
        for _ in range(count):
            sock = self.ctx.socket(zmq.DEALER)
            sock.linger = 0
            sock.connect(endpoint)
            self.socks.append(sock)
            self.poller.register(sock, zmq.POLLIN)
        self._ids = itertools.count(1)

    def put(self, sock: zmq.Socket[Any], req: StorePutRequest, payload: bytes) -> None:
        env = RequestEnvelope(next(self._ids), req)
        sock.send_multipart(self.codec.request_frames(env, [payload]), copy=False)

    def replies(self, timeout_ms: int) -> list[tuple[zmq.Socket[Any], Any]]:
        out = []
        for sock, _ in self.poller.poll(timeout_ms):
            frames = sock.recv_multipart()
            env, _payload = self.codec.decode_reply(frames[1:])
            out.append((sock, env.body))
        return out

    def status(self) -> StoreStatusReply:
        sock = self.socks[0]
        sock.send_multipart(self.codec.request_frames(RequestEnvelope(0, Status()), None))
        if not sock.poll(10_000):
            raise TimeoutError("no status reply")
        env, _ = self.codec.decode_reply(sock.recv_multipart()[1:])
        assert isinstance(env.body, StoreStatusReply)
        return env.body

    def close(self) -> None:
        self.ctx.destroy(linger=0)


def one_run(
    mode: str, senders: int, messages: int, batch: int, topics: int
) -> tuple[float, int, float]:
    """msg/s, how many fdatasyncs of the log the store made, and its CPU µs per message."""
    names = [f"BenchTopic{i}" for i in range(topics)]
    body = b"x" * 1024
    payloads = {
        t: encode_record(t.encode(), body, encode_properties({"TAGS": "A"})) * batch for t in names
    }
    puts = max(messages // batch, senders)
    with tempfile.TemporaryDirectory() as root:
        sp = start_store(root, mode)
        client = Senders(sp.endpoints["endpoint"], senders)
        try:
            target = itertools.cycle(itertools.product(names, range(QUEUES_PER_TOPIC)))
            if topics > 1:  # create every queue before timing: first puts create files
                for name, qid in itertools.islice(target, topics * QUEUES_PER_TOPIC):
                    client.put(client.socks[0], StorePutRequest(name, qid, batch), payloads[name])
                    while not client.replies(10_000):
                        pass
            syncs_before = client.status().log_syncs
            cpu_before = cpu_seconds(sp.pid)
            started = time.perf_counter()
            sent = done = 0
            for sock in client.socks:
                name, qid = next(target)
                client.put(sock, StorePutRequest(name, qid, batch), payloads[name])
                sent += 1
            while done < puts:
                got = client.replies(10_000)
                if not got:
                    raise TimeoutError(f"no reply ({done} of {puts} puts done)")
                for sock, body in got:
                    if not isinstance(body, StorePutReply) or body.status != SendStatus.SEND_OK:
                        raise RuntimeError(f"put failed: {body}")
                    done += 1
                    if sent < puts:
                        name, qid = next(target)
                        client.put(sock, StorePutRequest(name, qid, batch), payloads[name])
                        sent += 1
            rate = puts * batch / (time.perf_counter() - started)
            cpu_us = (cpu_seconds(sp.pid) - cpu_before) / (puts * batch) * 1e6
            syncs = client.status().log_syncs - syncs_before
        finally:
            client.close()
            sp.stop()
    return rate, syncs, cpu_us


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--senders", default="1,8,64")
    parser.add_argument("--modes", default="ASYNC_FLUSH,SYNC_FLUSH")
    parser.add_argument("--topics", default="1")
    args = parser.parse_args()
    figures = []
    for topics in (int(t) for t in args.topics.split(",")):
        for mode in args.modes.split(","):
            for senders in (int(s) for s in args.senders.split(",")):
                runs = [
                    one_run(mode, senders, args.messages, args.batch, topics)
                    for _ in range(args.runs)
                ]
                name = f"{mode}, {senders} sender(s), batch {args.batch} x 1 KB"
                if topics > 1 or "," in args.topics:
                    name += f", {topics} topic(s)"
                figures.append(Figure(name, "msg/s", [r for r, _, _ in runs]))
                figures.append(Figure(f"  store CPU ({name})", "µs/msg", [c for _, _, c in runs]))
                if mode == "SYNC_FLUSH":
                    per_sync = [args.messages / max(s, 1) for _, s, _ in runs]
                    figures.append(Figure(f"  messages per fdatasync ({name})", "msg", per_sync))
    report("store flush throughput", figures)


if __name__ == "__main__":
    main()
