"""A do-nothing RocketMQ remoting responder: the `rocketmq` client's own floor for
bench/rocketmq_door.py.

    python bench/rocketmq/floor_server.py [--queues 4]

Serves name server and broker on one port: GET_ROUTEINFO_BY_TOPIC gets a route to itself (one
broker, `--queues` queues, read-write), SEND_MESSAGE gets SUCCESS with msgId, queueId and
queueOffset (a counter per queue), everything else SUCCESS with no fields. Nothing is stored.
Frames are built with ferry.protocol.rocketmq. Prints `READY host:port` once listening, and
stops when its stdin closes. One thread per connection: the client keeps one connection.
"""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import sys
import threading

from ferry.protocol.rocketmq import CommandError, FrameSplitter, RequestCode, decode, encode

BROKER = "floor-b0"
MSG_ID = "7F00000100002A9F0000000000000000"


class Floor:
    def __init__(self, queues: int) -> None:
        self.queues = queues
        self.addr = ""
        self._offsets = [itertools.count() for _ in range(queues)]

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

    def answer(self, frame: bytes) -> bytes:
        cmd = decode(frame)
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
        with conn:
            try:
                while data := conn.recv(1 << 16):
                    replies = [self.answer(frame) for frame in splitter.feed(data)]
                    if replies:
                        conn.sendall(b"".join(replies))
            except (OSError, CommandError):
                return  # the client went away, or sent what is not a frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, default=4)
    args = parser.parse_args()
    floor = Floor(args.queues)
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
