"""OpenTelemetry spans of the SDK, following the messaging conventions for RocketMQ.

Only the API is used; the application configures the SDK. When no tracer provider is installed
(checked once, when a client starts) every function here returns at once. An instrumentation
error is logged and never breaks a send or a poll.
"""

from __future__ import annotations

import logging
import time
from collections.abc import MutableMapping, Sequence

from opentelemetry import propagate, trace
from opentelemetry.trace import Link, NoOpTracerProvider, ProxyTracerProvider, SpanKind
from opentelemetry.trace.status import Status, StatusCode

from ferry.client.message import Message, MessageExt

log = logging.getLogger("ferry.client.tracing")

SYSTEM = "rocketmq"
TRACER_NAME = "ferry.client"


class Tracing:
    def __init__(
        self, tracer_provider: trace.TracerProvider | None = None, client_id: str = ""
    ) -> None:
        provider = tracer_provider or trace.get_tracer_provider()
        # The API's defaults: nothing configured, so spans would be dropped anyway.
        self.enabled = not isinstance(provider, ProxyTracerProvider | NoOpTracerProvider)
        self._tracer = provider.get_tracer(TRACER_NAME)
        self._client_id = client_id

    # ---- producer ----

    def start_send(
        self, topic: str, msgs: Sequence[Message], msg_ids: Sequence[str]
    ) -> trace.Span | None:
        """A PRODUCER span `send {topic}`, a child of the caller's current span."""
        if not self.enabled:
            return None
        try:
            first = msgs[0]
            attributes: dict[str, str | int | list[str]] = {
                "messaging.system": SYSTEM,
                "messaging.destination.name": topic,
                "messaging.operation.name": "send",
                "messaging.operation.type": "send",
                "messaging.rocketmq.message.type": _message_type(first),
            }
            if self._client_id:
                attributes["messaging.client.id"] = self._client_id
            if len(msgs) == 1:
                attributes["messaging.message.id"] = msg_ids[0]
                if first.tags:
                    attributes["messaging.rocketmq.message.tag"] = first.tags
                if first.keys:
                    attributes["messaging.rocketmq.message.keys"] = list(first.keys)
                if first.delay_level > 0:
                    attributes["messaging.rocketmq.message.delay_time_level"] = first.delay_level
                if first.deliver_at_ms is not None:
                    attributes["messaging.rocketmq.message.delivery_timestamp"] = (
                        first.deliver_at_ms
                    )
            else:
                attributes["messaging.batch.message_count"] = len(msgs)
            return self._tracer.start_span(
                f"send {topic}", kind=SpanKind.PRODUCER, attributes=attributes
            )
        except Exception:
            log.debug("send span not started", exc_info=True)
            return None

    def inject(self, span: trace.Span | None, carrier: MutableMapping[str, str]) -> None:
        """Writes the span's W3C context (traceparent, tracestate) into message properties."""
        if span is None:
            return
        try:
            propagate.inject(carrier, context=trace.set_span_in_context(span))
        except Exception:
            log.debug("trace context not injected", exc_info=True)

    @staticmethod
    def end(
        span: trace.Span | None,
        error: BaseException | None = None,
        *,
        address: str = "",
        queue_id: int | None = None,
    ) -> None:
        if span is None:
            return
        try:
            if address:
                host, _, port = address.rpartition(":")
                span.set_attribute("server.address", host)
                if port.isdigit():
                    span.set_attribute("server.port", int(port))
            if queue_id is not None:
                span.set_attribute("messaging.destination.partition.id", str(queue_id))
            if error is not None:
                span.set_attribute("error.type", type(error).__name__)
                span.set_status(Status(StatusCode.ERROR, str(error)))
            span.end()
        except Exception:
            log.debug("span not ended", exc_info=True)

    # ---- consumer ----

    def record_receive(
        self, group: str, msgs: Sequence[MessageExt], start_ns: int, model: str
    ) -> None:
        """One CLIENT span `receive {topic}` per topic, linked to each message's creation
        context (taken from its properties)."""
        if not self.enabled or not msgs:
            return
        try:
            by_topic: dict[str, list[MessageExt]] = {}
            for msg in msgs:
                by_topic.setdefault(msg.topic, []).append(msg)
            for topic, batch in by_topic.items():
                links = []
                for msg in batch:
                    if "traceparent" not in msg.properties:
                        continue
                    ctx = propagate.extract(msg.properties)
                    span_ctx = trace.get_current_span(ctx).get_span_context()
                    if span_ctx.is_valid:
                        links.append(Link(span_ctx))
                span = self._tracer.start_span(
                    f"receive {topic}",
                    kind=SpanKind.CLIENT,
                    links=links,
                    start_time=start_ns,
                    attributes={
                        "messaging.system": SYSTEM,
                        "messaging.destination.name": topic,
                        "messaging.operation.name": "receive",
                        "messaging.operation.type": "receive",
                        "messaging.consumer.group.name": group,
                        "messaging.batch.message_count": len(batch),
                        "messaging.rocketmq.consumption_model": model.lower(),
                    },
                )
                span.end(time.time_ns())
        except Exception:
            log.debug("receive span not recorded", exc_info=True)

    def start_process(
        self, group: str, msgs: Sequence[MessageExt], model: str
    ) -> trace.Span | None:
        """A CONSUMER span `process {topic}` around a push listener's call, linked to each
        message's creation context; end it with end(span, error)."""
        if not self.enabled or not msgs:
            return None
        try:
            topic = msgs[0].topic
            links = []
            for msg in msgs:
                if "traceparent" in msg.properties:
                    ctx = propagate.extract(msg.properties)
                    span_ctx = trace.get_current_span(ctx).get_span_context()
                    if span_ctx.is_valid:
                        links.append(Link(span_ctx))
            attributes: dict[str, str | int] = {
                "messaging.system": SYSTEM,
                "messaging.destination.name": topic,
                "messaging.operation.name": "process",
                "messaging.operation.type": "process",
                "messaging.consumer.group.name": group,
                "messaging.batch.message_count": len(msgs),
                "messaging.rocketmq.consumption_model": model.lower(),
            }
            if len(msgs) == 1:
                attributes["messaging.message.id"] = msgs[0].msg_id
                attributes["messaging.rocketmq.message.reconsume_times"] = msgs[0].reconsume_times
            return self._tracer.start_span(
                f"process {topic}", kind=SpanKind.CONSUMER, links=links, attributes=attributes
            )
        except Exception:
            log.debug("process span not started", exc_info=True)
            return None


def _message_type(msg: Message) -> str:
    if msg.delay_level > 0 or msg.deliver_at_ms is not None:
        return "delay"
    return "normal"
