"""The `rocketmq` 0.4.4 client's side of bench/rocketmq_door.py. Runs with the client venv's
python (ferry.runtime.testing.client_venvs), not the workspace's: it imports only the client.

    python client_work.py produce '{"namesrv", "topic", "body_len", "sync", "threads",
                                    "thread_messages", "batch", "batch_messages"}'
    python client_work.py consume '{"namesrv", "topic", "group", "count", "timeout_s"}'

Prints one JSON line of figures. produce: sync send latencies in µs (one in flight, sorted),
msg/s of send_sync from `threads` threads, msg/s of send_batch of `batch`. consume: a
PushConsumer's msg/s from its first message to its `count`th.
"""

import ctypes
import json
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer
from rocketmq.ffi import dll

PLAIN_UP_TO = 4 * 1024 * 1024
WARMUP = 50  # sends before timing: the route, the connection, the client's own threads
# not declared by the wrapper's ffi module: without argtypes ctypes would cut the handle
dll.SetProducerCompressMsgBodyOverHowmuch.argtypes = [ctypes.c_void_p, ctypes.c_int]
dll.SetProducerCompressMsgBodyOverHowmuch.restype = ctypes.c_int


def message(topic, body):
    msg = Message(topic)
    msg.set_body(body)
    return msg


def sync_latencies(producer, topic, body, count):
    took = []
    for _ in range(count):
        msg = message(topic, body)
        started = time.perf_counter()
        producer.send_sync(msg)
        took.append((time.perf_counter() - started) * 1e6)
    return sorted(took)


def started_producer(spec, instance):
    producer = Producer(spec.get("group", "bench-rmq-door"))
    # each its own client instance (connection): threads sharing one producer fail their
    # sends at once ("GetTransport ... get timed_mutex timeout") when they meet on its lock
    dll.SetProducerInstanceName(producer._handle, instance.encode())
    # the client zlib-compresses a whole batch body of 4 KB and more (32 x 128 B is): send
    # batches plain, so that door and floor compare without zlib on the client's side
    dll.SetProducerCompressMsgBodyOverHowmuch(producer._handle, PLAIN_UP_TO)
    producer.set_namesrv_addr(spec["namesrv"])
    producer.start()
    return producer


def threaded_rate(spec, body, threads, total):
    topic = spec["topic"]
    each = total // threads
    errors = []
    producers = [started_producer(spec, f"bench-thread-{i}") for i in range(threads)]
    for producer in producers:
        for _ in range(WARMUP):
            producer.send_sync(message(topic, body))

    def work(producer):
        try:
            for _ in range(each):
                producer.send_sync(message(topic, body))
        except Exception as exc:  # noqa: BLE001 - reported, the figure then is not
            errors.append(repr(exc))

    workers = [threading.Thread(target=work, args=(p,)) for p in producers]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    took = time.perf_counter() - started
    for producer in producers:
        producer.shutdown()
    if errors:
        raise RuntimeError(errors[0])
    return each * threads / took


def batch_rate(producer, topic, body, size, total):
    rounds = total // size
    started = time.perf_counter()
    for _ in range(rounds):
        producer.send_batch([message(topic, body) for _ in range(size)])
    return rounds * size / (time.perf_counter() - started)


def produce(spec):
    body = "x" * spec["body_len"]  # no NUL: the wrapper cuts bodies at the first one
    topic = spec["topic"]
    producer = started_producer(spec, "bench-main")
    try:
        for _ in range(WARMUP):
            producer.send_sync(message(topic, body))
        sync = sync_latencies(producer, topic, body, spec["sync"])
        batch = batch_rate(producer, topic, body, spec["batch"], spec["batch_messages"])
    finally:
        producer.shutdown()
    threads = threaded_rate(spec, body, spec["threads"], spec["thread_messages"])
    return {"sync_us": sync, "threads_rate": threads, "batch_rate": batch}


def consume(spec):
    count = spec["count"]
    lock = threading.Lock()
    seen = [0]
    times = {}
    done = threading.Event()

    def on_message(_msg):
        now = time.perf_counter()
        with lock:
            seen[0] += 1
            if seen[0] == 1:
                times["first"] = now
            if seen[0] == count:
                times["last"] = now
                done.set()

    consumer = PushConsumer(spec["group"])
    consumer.set_namesrv_addr(spec["namesrv"])
    consumer.subscribe(spec["topic"], on_message)
    started = time.perf_counter()
    consumer.start()
    done.wait(spec.get("timeout_s", 120))
    consumer.shutdown()
    if "last" not in times:
        raise RuntimeError(f"consumed {seen[0]} of {count}")
    return {
        "rate": (count - 1) / (times["last"] - times["first"]),
        "to_first_s": times["first"] - started,
        "seen": seen[0],
    }


def main():
    mode, spec = sys.argv[1], json.loads(sys.argv[2])
    out = produce(spec) if mode == "produce" else consume(spec)
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
