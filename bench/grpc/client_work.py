"""The official RocketMQ 5 Python client's side of bench/grpc_proxy.py (rocketmq-python-client
5.1.2). Runs with the client venv's python (ferry.runtime.testing.client_venvs), not the
workspace's: it imports only the client.

    python client_work.py produce '{"endpoint", "topic", "body_len", "sync", "threads",
                                    "thread_messages"}'
    python client_work.py consume '{"endpoint", "topic", "group", "count", "threads",
                                    "batch", "timeout_s"}'

Prints one JSON line. produce: sync send latencies in µs (one in flight, sorted), and the msg/s
of send() from `threads` threads on one Producer. consume: msg/s of a SimpleConsumer's
receive(batch) + ack() of each message, from `threads` threads on one consumer, until
`count` are acked.
"""

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

WARMUP = 50  # sends before timing: the route, the channel, the client's own threads


def message(topic, body):
    msg = Message()
    msg.topic = topic
    msg.body = body
    return msg


def produce(spec):
    topic, body = spec["topic"], b"x" * spec["body_len"]
    producer = Producer(ClientConfiguration(spec["endpoint"], Credentials()), (topic,))
    producer.startup()
    try:
        for _ in range(WARMUP):
            producer.send(message(topic, body))
        took = []
        for _ in range(spec["sync"]):
            msg = message(topic, body)
            started = time.perf_counter()
            producer.send(msg)
            took.append((time.perf_counter() - started) * 1e6)
        each = spec["thread_messages"] // spec["threads"]

        def work():
            for _ in range(each):
                producer.send(message(topic, body))

        workers = [threading.Thread(target=work) for _ in range(spec["threads"])]
        started = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        rate = each * spec["threads"] / (time.perf_counter() - started)
    finally:
        producer.shutdown()
    return {"sync_us": sorted(took), "threads_rate": rate}


def consume(spec):
    config = ClientConfiguration(spec["endpoint"], Credentials())
    consumer = SimpleConsumer(
        config, spec["group"], {spec["topic"]: FilterExpression()}, await_duration=1
    )
    consumer.startup()
    acked, lock = [0], threading.Lock()
    deadline = time.monotonic() + spec["timeout_s"]
    first = []

    def work():
        while time.monotonic() < deadline:
            with lock:
                if acked[0] >= spec["count"]:
                    return
            msgs = consumer.receive(spec["batch"], 60)
            if msgs and not first:
                first.append(time.perf_counter())
            for m in msgs:  # ack_async of 5.1.2 returns None (and needs a loop per thread)
                consumer.ack(m)
            with lock:
                acked[0] += len(msgs)

    try:
        workers = [threading.Thread(target=work) for _ in range(spec["threads"])]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        ended = time.perf_counter()
    finally:
        consumer.shutdown()
    if acked[0] < spec["count"]:
        raise SystemExit(f"acked {acked[0]} of {spec['count']}")
    return {"rate": acked[0] / (ended - first[0])}


if __name__ == "__main__":
    mode, spec = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(produce(spec) if mode == "produce" else consume(spec)), flush=True)
