"""RabbitMQ from pika: a durable queue (classic, or quorum as a variant), persistent messages,
publisher confirms with a window of 1,000 on a SelectConnection, a consumer with prefetch 256
acking each message."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import pika
from pika.adapters.select_connection import SelectConnection
from pika.spec import Basic

from peers.workload import BODY, PIPELINE, STAMP, Latency, Pacer, percentiles

PREFETCH = 256
PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
DEADLINE_S = 600


class RabbitSide:
    def __init__(self, port: int, quorum: bool = False) -> None:
        self.params = pika.ConnectionParameters("127.0.0.1", port)
        self.args = {"x-queue-type": "quorum"} if quorum else {}

    def close(self) -> None:
        pass

    def _select(self, on_channel: Callable[[SelectConnection, Any], None]) -> None:
        """Runs a SelectConnection until the driver closes it (or the deadline passes)."""
        failure: list[str] = []

        def opened(conn: SelectConnection) -> None:
            conn.channel(on_open_callback=lambda ch: on_channel(conn, ch))

        def open_failed(_conn: SelectConnection, err: Any) -> None:
            failure.append(str(err))
            conn.ioloop.stop()

        def closed(_conn: SelectConnection, reason: Any) -> None:
            if not isinstance(reason, pika.exceptions.ConnectionClosedByClient):
                failure.append(str(reason))
            conn.ioloop.stop()

        conn = SelectConnection(
            self.params,
            on_open_callback=opened,
            on_open_error_callback=open_failed,
            on_close_callback=closed,
        )
        conn.ioloop.call_later(DEADLINE_S, conn.close)
        conn.ioloop.start()
        if failure:
            raise RuntimeError(f"RabbitMQ: {failure[0]}")

    def produce(self, queue: str, count: int) -> float:
        published = 0
        unconfirmed: collections.deque[int] = collections.deque()
        confirmed_alone: set[int] = set()
        started = [0.0]
        took = [0.0]

        def on_channel(conn: SelectConnection, ch: Any) -> None:
            def publish_more() -> None:
                nonlocal published
                while published < count and len(unconfirmed) < PIPELINE:
                    ch.basic_publish("", queue, BODY, PERSISTENT)
                    published += 1
                    unconfirmed.append(published)  # delivery tags count from 1
                if published == count and not unconfirmed:
                    took[0] = time.perf_counter() - started[0]
                    conn.close()

            def on_confirm(frame: Any) -> None:
                method = frame.method
                if isinstance(method, Basic.Nack):
                    raise RuntimeError("RabbitMQ nacked a publish")
                if method.multiple:
                    while unconfirmed and unconfirmed[0] <= method.delivery_tag:
                        unconfirmed.popleft()
                else:
                    confirmed_alone.add(method.delivery_tag)
                while unconfirmed and unconfirmed[0] in confirmed_alone:
                    confirmed_alone.discard(unconfirmed.popleft())
                publish_more()

            def declared(_frame: Any) -> None:
                started[0] = time.perf_counter()
                publish_more()

            ch.confirm_delivery(
                on_confirm,
                callback=lambda _f: ch.queue_declare(
                    queue, durable=True, arguments=self.args, callback=declared
                ),
            )

        self._select(on_channel)
        if published != count or unconfirmed:
            raise RuntimeError(f"RabbitMQ confirmed {published - len(unconfirmed)} of {count}")
        return count / took[0]

    def consume(self, queue: str, count: int) -> float:
        got = 0
        started = [0.0]
        took = [0.0]

        def on_channel(conn: SelectConnection, ch: Any) -> None:
            def on_message(_ch: Any, method: Any, _props: Any, _body: bytes) -> None:
                nonlocal got
                ch.basic_ack(method.delivery_tag)
                got += 1
                if got == count:
                    took[0] = time.perf_counter() - started[0]
                    conn.close()

            def qos_ok(_frame: Any) -> None:
                started[0] = time.perf_counter()
                ch.basic_consume(queue, on_message)

            ch.basic_qos(prefetch_count=PREFETCH, callback=qos_ok)

        self._select(on_channel)
        if got != count:
            raise RuntimeError(f"RabbitMQ delivered {got} of {count}")
        return count / took[0]

    def _blocking(self, queue: str) -> tuple[pika.BlockingConnection, Any]:
        conn = pika.BlockingConnection(self.params)
        ch = conn.channel()
        ch.queue_declare(queue, durable=True, arguments=self.args)
        return conn, ch

    def sync_latency(self, queue: str, samples: int) -> Latency:
        """One persistent publish at a time, each waiting for its confirm."""
        conn, ch = self._blocking(queue)
        try:
            ch.confirm_delivery()
            for _ in range(200):
                ch.basic_publish("", queue, BODY, PERSISTENT)
            took = []
            for _ in range(samples):
                started = time.perf_counter()
                ch.basic_publish("", queue, BODY, PERSISTENT)
                took.append((time.perf_counter() - started) * 1e6)
        finally:
            conn.close()
        return percentiles(took)

    def end_to_end(self, queue: str, rate: int, seconds: float) -> Latency:
        """Confirmed persistent publishes at a steady rate from this thread; a consumer thread
        on its own connection (prefetch 256, acking each); latency from before the publish."""
        samples: list[float] = []
        stop = threading.Event()
        ready = threading.Event()
        errors: list[BaseException] = []

        def consumer() -> None:
            try:
                conn, ch = self._blocking(queue)
            except Exception as err:  # noqa: BLE001 - reported by the caller below
                errors.append(err)
                ready.set()
                return
            try:

                def on_message(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
                    samples.append((time.perf_counter_ns() - STAMP.unpack_from(body)[0]) / 1000)
                    ch.basic_ack(method.delivery_tag)

                ch.basic_qos(prefetch_count=PREFETCH)
                ch.basic_consume(queue, on_message)
                ready.set()
                while not stop.is_set():
                    conn.process_data_events(time_limit=0.1)
            finally:
                conn.close()

        thread = threading.Thread(target=consumer, daemon=True)
        thread.start()
        ready.wait(30)
        if errors:
            raise RuntimeError(f"RabbitMQ consumer: {errors[0]}")
        total = int(rate * seconds)
        conn, ch = self._blocking(queue)
        try:
            ch.confirm_delivery()
            pacer = Pacer(total, rate)
            for body in pacer:
                ch.basic_publish("", queue, body, PERSISTENT)
            deadline = time.monotonic() + 30
            while len(samples) < total and time.monotonic() < deadline:
                time.sleep(0.02)  # the last deliveries, bounded
        finally:
            conn.close()
            stop.set()
            thread.join(10)
        return pacer.result(samples)
