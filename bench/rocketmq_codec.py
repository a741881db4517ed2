"""The RocketMQ remoting codec's cost per frame: encode and decode of a SEND_MESSAGE as the
rocketmq 0.4.4 client sends it (JSON header, its 12 header fields, a 128-byte body), its
reply, the same in ROCKETMQ binary headers, and the splitting of a stream of them. Also the
door's batch body as records (32 items of 128 bytes), in C and in Python.

    uv run --frozen --all-packages python bench/rocketmq_codec.py [--runs 5] [--ops 100000]

Prints µs per operation (median of the runs, and their spread). No sockets: this is the
codec's share of the send path, one frame each way per message.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from common import Figure, report

from ferry import native
from ferry.protocol import record
from ferry.protocol.rocketmq import (
    FrameSplitter,
    LanguageCode,
    RemotingCommand,
    RequestCode,
    SerializeType,
    decode,
    encode,
)
from ferry.protocol.rocketmq.command import encode_parts
from ferry.remoting.door.send_records import batch_records, batch_records_py

# the fields of a send as captured from the client
# (docs/perf-notes/2026-12-02-rocketmq-client-wire.md)
SEND_EXT = {
    "producerGroup": "bench-producers",
    "topic": "BenchTopic",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "queueId": "2",
    "sysFlag": "0",
    "bornTimestamp": "1796222671265",
    "flag": "0",
    "properties": "KEYS\x01order-1\x02TAGS\x01TagA\x02UNIQ_KEY\x01"
    "0100007F0000BACA00002174AD0D0100\x02WAIT\x01true\x02",
    "reconsumeTimes": "0",
    "unitMode": "0",
    "batch": "0",
}


def send(kind: SerializeType) -> RemotingCommand:
    return RemotingCommand(
        code=RequestCode.SEND_MESSAGE,
        language=LanguageCode.CPP,
        version=63,
        opaque=12345,
        ext_fields=dict(SEND_EXT),
        body=b"x" * 128,
        serialize_type=kind,
    )


def per_op(ops: int, fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    for _ in range(ops):
        fn()
    return (time.perf_counter() - started) / ops * 1e6


def cases(ops: int) -> dict[str, Callable[[], float]]:
    out: dict[str, Callable[[], float]] = {}
    for kind in SerializeType:
        cmd = send(kind)
        frame = encode(cmd)[4:]
        reply = cmd.response(
            0,
            ext_fields={
                "msgId": "7F00000100002A9F0000000000001234",
                "queueId": "2",
                "queueOffset": "100",
            },
        )
        name = kind.name.lower()
        out[f"{name} send encode+decode"] = lambda c=cmd: per_op(ops, lambda: decode(encode(c)[4:]))
        out[f"{name} send decode"] = lambda f=frame: per_op(ops, lambda: decode(f))
        out[f"{name} send encode"] = lambda c=cmd: per_op(ops, lambda: encode(c))
        out[f"{name} reply encode"] = lambda r=reply: per_op(ops, lambda: encode(r))
    # a pull's response with 32 stored records of 1 KB: whole frame, or header and body apart
    pull = RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=7).response(
        0,
        ext_fields={
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": "132",
            "minOffset": "0",
            "maxOffset": "5000",
        },
        body=b"r" * (32 * 1100),
    )
    out["pull reply (32 x 1 KB) encode"] = lambda: per_op(ops, lambda: encode(pull))
    out["pull reply (32 x 1 KB) encode_parts"] = lambda: per_op(ops, lambda: encode_parts(pull))
    stream = encode(send(SerializeType.JSON)) * 64

    def split() -> float:
        splitter = FrameSplitter()
        # 64 frames per chunk, as a busy connection's read returns them
        return per_op(ops // 64, lambda: splitter.feed(stream)) / 64

    out["split, per frame (64 a chunk)"] = split
    out.update(batch_cases(ops))
    return out


def batch_cases(ops: int) -> dict[str, Callable[[], float]]:
    """A batch body of 32 items of 128 bytes, as the client sends it, as records."""
    props = SEND_EXT["properties"].encode()
    item_size = 20 + 128 + 2 + len(props)  # total, magic, crc, flag, bodyLen; propLen
    item = b"".join(
        (
            item_size.to_bytes(4, "big"),
            bytes(12),
            (128).to_bytes(4, "big"),
            b"x" * 128,
            len(props).to_bytes(2, "big"),
            props,
        )
    )
    body = item * 32
    host = record.pack_host("127.0.0.1:50000")

    def as_records(fn: Callable[..., tuple[bytes, int]]) -> Callable[[], object]:
        return lambda: fn(
            "BenchTopic",
            body,
            queue_id=2,
            sysflag=0,
            born_timestamp=1796222671265,
            host=host,
            reconsume_times=0,
        )

    out: dict[str, Callable[[], float]] = {
        "batch 32 x 128 B as records, Python": lambda: per_op(
            ops // 10, as_records(batch_records_py)
        )
    }
    if native.ENABLED:  # batch_records takes the C loop
        out["batch 32 x 128 B as records, C"] = lambda: per_op(ops, as_records(batch_records))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ops", type=int, default=100_000)
    args = parser.parse_args()
    figures = [
        Figure(name, "µs/op", [fn() for _ in range(args.runs)])
        for name, fn in cases(args.ops).items()
    ]
    report("rocketmq codec", figures)


if __name__ == "__main__":
    main()
