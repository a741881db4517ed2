"""A producer's options, checked once: the sync Producer and ferry.client.aio's Producer are
both ProducerSettings."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

from ferry.client.batching import BatchConfig
from ferry.client.instance import ClientIdentity, InstanceOptions
from ferry.client.latency_fault import (
    LATENCY_MAX_MS,
    NOT_AVAILABLE_MS,
    FaultConfig,
    LatencyFaultTolerance,
)
from ferry.client.message import MessageQueue
from ferry.client.prepare import Preparer
from ferry.client.publish import Publisher
from ferry.client.route import RouteTable, parse_namesrv
from ferry.client.selector import Selector
from ferry.client.tracing import Tracing
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.names import check_group

MiB = 1024 * 1024
COMPRESS_OVER = 4096  # compressMsgBodyOverHowmuch


class ProducerSettings(InstanceOptions):
    """A producer's options, checked: what the sync Producer and ferry.client.aio's share."""

    def __init__(
        self,
        group: str,
        namesrv: str,
        *,
        send_timeout_ms: int = 3000,
        retry_times: int = 2,
        max_message_size: int = 4 * MiB,
        default_topic_queue_nums: int = 4,
        heartbeat_interval_ms: int = 30_000,
        poll_namesrv_interval_ms: int = 30_000,
        auto_batch: bool = True,
        batch_max_count: int = 256,
        batch_max_bytes: int = 512 * 1024,
        max_batches_in_flight: int = 4,
        batch_linger_ms: float = 5,
        compress_over: int = COMPRESS_OVER,
        send_latency_fault_enable: bool = False,
        latency_max_ms: tuple[int, ...] = LATENCY_MAX_MS,
        not_available_duration_ms: tuple[int, ...] = NOT_AVAILABLE_MS,
        tracer_provider: trace.TracerProvider | None = None,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        """credentials: what every request is signed with, when the cluster has
        authentication on (ferry.protocol.auth). tls_server_key: with tlsEnable, the
        cluster's public key (server.key's path, or the key itself).
        auto_batch: send_async messages of a topic travel in batches of up to
        batch_max_count messages / batch_max_bytes, max_batches_in_flight requests per topic at
        a time; a partial batch waits at most batch_linger_ms while requests are in flight.
        compress_over: bodies longer than this many bytes are compressed (-1: never).
        send_latency_fault_enable: avoid brokers that were slow or failed, for the time
        not_available_duration_ms[i] of the largest latency_max_ms[i] their latency reached
        (a failure counts as 10 s)."""
        check_group(group)
        parse_namesrv(namesrv)
        if retry_times < 0 or send_timeout_ms <= 0 or max_message_size <= 0:
            raise InvalidParameterError("retry_times, send_timeout_ms, max_message_size")
        if batch_max_count <= 0 or batch_max_bytes <= 0 or max_batches_in_flight <= 0:
            raise InvalidParameterError(
                "batch_max_count, batch_max_bytes, max_batches_in_flight must be positive"
            )
        if batch_linger_ms < 0:
            raise InvalidParameterError("batch_linger_ms must be >= 0")
        self.group = group
        self.namesrv = namesrv
        self.send_timeout_s = send_timeout_ms / 1000
        self.retry_times = retry_times
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self._poll_namesrv_s = poll_namesrv_interval_ms / 1000
        self._tracer_provider = tracer_provider
        self._credentials = credentials
        self._tls_server_key = tls_server_key
        self.compress_over = compress_over
        self._faults = LatencyFaultTolerance(
            FaultConfig(
                send_latency_fault_enable, tuple(latency_max_ms), tuple(not_available_duration_ms)
            )
        )
        self._batching = BatchConfig(
            auto_batch,
            batch_max_count,
            min(batch_max_bytes, max_message_size),
            max_batches_in_flight,
            batch_linger_ms / 1000,
        )

    def _sending_parts(
        self, routes: RouteTable, who: ClientIdentity, tracing: Tracing
    ) -> tuple[Publisher, Preparer]:
        """What a started producer chooses queues and encodes messages with."""
        publisher = Publisher(routes, self.default_topic_queue_nums, self._faults)
        preparer = Preparer(
            who.msg_ids,
            who.born_host,
            tracing,
            max_message_size=self.max_message_size,
            compress_over=self.compress_over,
        )
        return publisher, preparer

    def _send_args(
        self, to: MessageQueue | Selector | int | None, arg: Any, timeout_ms: int | None
    ) -> tuple[MessageQueue | Selector | None, Any, float]:
        """send()'s RocketMQ overloads sorted out: (queue or selector, arg, timeout in s)."""
        if isinstance(to, int):  # send(msg, timeout_ms)
            if isinstance(to, bool):
                raise InvalidParameterError(f"send(msg, {to}): not a queue, selector or timeout")
            to, timeout_ms = None, to
        elif isinstance(to, MessageQueue) and isinstance(arg, int) and timeout_ms is None:
            arg, timeout_ms = None, arg  # send(msg, queue, timeout_ms)
        timeout_s = self.send_timeout_s
        if timeout_ms is not None:
            if timeout_ms <= 0:
                raise InvalidParameterError(f"timeout_ms must be positive, not {timeout_ms}")
            timeout_s = timeout_ms / 1000
        return to, arg, timeout_s
