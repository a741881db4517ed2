"""A do-nothing RocketMQ remoting responder: the `rocketmq` client's own floor for
bench/rocketmq_door.py.

    python bench/rocketmq/floor_server.py [--queues 4] [--consume-messages N]

Serves name server and broker on one port: GET_ROUTEINFO_BY_TOPIC gets a route to itself (one
broker, `--queues` queues, read-write), SEND_MESSAGE gets SUCCESS with msgId, queueId and
queueOffset (a counter per queue), everything else SUCCESS with no fields. Nothing is stored.
For a push consumer: every group starts at offset 0 (QUERY_CONSUMER_OFFSET), its members are
the client ids of the heartbeats, and PULL_MESSAGE gets up to maxMsgNums canned 128-byte
records of the pulled queue (N / queues per queue, made once at start), or PULL_NOT_FOUND a
second later past the end, as a held pull would be.
Frames are built with ferry.protocol.rocketmq. Prints `READY host:port` once listening, and
stops when its stdin closes. One thread per connection: the client keeps one connection.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import socket
import struct
import sys
import threading
from collections.abc import Callable

from ferry.protocol import record
from ferry.protocol.record_layout import OFF_QUEUE_OFFSET
from ferry.protocol.rocketmq import (
    CommandError,
    FrameSplitter,
    RemotingCommand,
    RequestCode,
    decode,
    encode,
)

BROKER = "floor-b0"
MSG_ID = "7F00000100002A9F0000000000000000"
PULL_NOT_FOUND = 19
_I64 = struct.Struct(">q")
HOLD_S = 1.0


def canned_records(topic: str, queue_id: int, count: int) -> list[bytes]:
    one = bytearray(
        record.encode_record(
            topic.encode(), b"x" * 128, b"UNIQ_KEY\x01FLOOR\x02", queue_id=queue_id
        )
    )
    out = []
    for offset in range(count):
        _I64.pack_into(one, OFF_QUEUE_OFFSET, offset)
        out.append(bytes(one))
    return out


Send = Callable[[bytes], None]


class Floor:
    def __init__(self, queues: int, consume_messages: int = 0) -> None:
        self.queues = queues
        self.addr = ""
        self._offsets = [itertools.count() for _ in range(queues)]
        self._per_queue = consume_messages // queues
        self._records: dict[tuple[str, int], list[bytes]] = {}
        self._clients: dict[str, list[str]] = {}  # group -> client ids
        self._lock = threading.Lock()

    def _pull(self, cmd: RemotingCommand, send: Send) -> bytes | None:
        topic = cmd.ext_fields.get("topic", "")
        queue_id = int(cmd.ext_fields.get("queueId", "0"))
        offset = int(cmd.ext_fields.get("queueOffset", "0"))
        most = int(cmd.ext_fields.get("maxMsgNums", "32"))
        end = self._per_queue if not topic.startswith("%RETRY%") else 0
        fields = {"suggestWhichBrokerId": "0", "minOffset": "0", "maxOffset": str(end)}
        if offset >= end:  # held, then not found, as a broker's long polling answers
            late = encode(
                cmd.response(PULL_NOT_FOUND, ext_fields={**fields, "nextBeginOffset": str(offset)})
            )
            threading.Timer(HOLD_S, send, args=(late,)).start()
            return None
        with self._lock:
            made = self._records.get((topic, queue_id))
            if made is None:
                made = self._records[(topic, queue_id)] = canned_records(topic, queue_id, end)
        upto = min(end, offset + most)
        fields["nextBeginOffset"] = str(upto)
        return encode(cmd.response(0, ext_fields=fields, body=b"".join(made[offset:upto])))

    def route(self) -> bytes:
        return json.dumps(
            {
                "queueDatas": [
                    {
                        "brokerName": BROKER,
                        "readQueueNums": self.queues,
                        "writeQueueNums": self.queues,
                        "perm": 6,
                        "topicSysFlag": 0,
                    }
                ],
                "brokerDatas": [
                    {"cluster": "floor", "brokerName": BROKER, "brokerAddrs": {"0": self.addr}}
                ],
                "filterServerTable": {},
            }
        ).encode()

    def answer(self, frame: bytes, send: Send) -> bytes | None:
        cmd = decode(frame)
        if cmd.code == RequestCode.PULL_MESSAGE:
            return self._pull(cmd, send)
        if cmd.code == RequestCode.HEART_BEAT:
            beat = json.loads(cmd.body)
            with self._lock:
                for c in beat.get("consumerDataSet", []):
                    ids = self._clients.setdefault(c["groupName"], [])
                    if beat["clientID"] not in ids:
                        ids.append(beat["clientID"])
            return encode(cmd.response(0))
        if cmd.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            ids = self._clients.get(cmd.ext_fields.get("consumerGroup", ""), [])
            return encode(cmd.response(0, body=json.dumps({"consumerIdList": ids}).encode()))
        if cmd.code in (
            RequestCode.QUERY_CONSUMER_OFFSET,
            RequestCode.GET_MAX_OFFSET,
            RequestCode.GET_MIN_OFFSET,
        ):
            return encode(cmd.response(0, ext_fields={"offset": "0"}))
        if cmd.code == RequestCode.SEND_MESSAGE:
            queue_id = int(cmd.ext_fields.get("queueId", "0")) % self.queues
            # next() on itertools.count is atomic under the GIL: no lock needed
            offset = next(self._offsets[queue_id])
            fields = {"msgId": MSG_ID, "queueId": str(queue_id), "queueOffset": str(offset)}
            return encode(cmd.response(0, ext_fields=fields))
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            return encode(cmd.response(0, body=self.route()))
        return encode(cmd.response(0))

    def serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        splitter = FrameSplitter()
        lock = threading.Lock()

        def send(data: bytes) -> None:
            # OSError: gone, and a held pull's late answer has no one to go to
            with lock, contextlib.suppress(OSError):
                conn.sendall(data)

        with conn:
            try:
                while data := conn.recv(1 << 16):
                    replies = [self.answer(frame, send) for frame in splitter.feed(data)]
                    out = b"".join(r for r in replies if r is not None)
                    if out:
                        send(out)
            except (OSError, CommandError):
                return  # the client went away, or sent what is not a frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--consume-messages", type=int, default=0)
    args = parser.parse_args()
    floor = Floor(args.queues, args.consume_messages)
    listener = socket.create_server(("127.0.0.1", 0))
    host, port = listener.getsockname()[:2]
    floor.addr = f"{host}:{port}"

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=floor.serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    print(f"READY {floor.addr}", flush=True)
    sys.stdin.read()  # the benchmark closes our stdin to stop us


if __name__ == "__main__":
    main()
