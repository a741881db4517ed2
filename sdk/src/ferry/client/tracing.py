"""OpenTelemetry spans of the SDK, following the messaging conventions for RocketMQ.

Only the API is used, as OpenTelemetry's instrumentations do: a client takes the
`tracer_provider` it is given, else the global one, whenever the application (or
`opentelemetry-instrument`, or ferry.client.enable_tracing) installs it. While there is none,
every function here returns at once (`enabled` is a plain attribute, looked up again by
refresh(), which ClientInstance calls each second until a provider shows up). An
instrumentation error is logged and never breaks a send or a poll.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Link, NoOpTracerProvider, ProxyTracerProvider, SpanKind
from opentelemetry.trace.status import Status, StatusCode

from ferry.client.message import Message, MessageExt
from ferry.protocol.span_attributes import AttributeValue, messaging

log = logging.getLogger("ferry.client.tracing")

TRACER_NAME = "ferry.client"
# A batch's message ids, joined by ",", in one span event (as the broker's send span has them)
BATCH_EVENT = "messages"
BATCH_IDS = "ferry.batch.message_ids"


class Tracing:
    def __init__(
        self, tracer_provider: trace.TracerProvider | None = None, client_id: str = ""
    ) -> None:
        self._provider = tracer_provider  # None: the global one
        self._tracer: trace.Tracer = trace.NoOpTracer()
        self._client_id = client_id
        self.enabled = False
        self.refresh()

    @property
    def fixed(self) -> bool:
        """Whether refresh() can never change `enabled` (a provider was given, or is found)."""
        return self.enabled or self._provider is not None

    def refresh(self) -> bool:
        """Looks for the provider again (the global one may have been installed since); True
        once spans are made."""
        if self.enabled:
            return True
        provider = self._provider or trace.get_tracer_provider()
        # The API's defaults: nothing configured, so spans would be dropped anyway.
        if isinstance(provider, ProxyTracerProvider | NoOpTracerProvider):
            return False
        self._tracer = provider.get_tracer(TRACER_NAME)
        self.enabled = True  # after the tracer: a thread that sees it on finds the tracer
        return True

    # ---- producer ----

    def start_send(
        self, topic: str, msgs: Sequence[Message], msg_ids: Sequence[str]
    ) -> trace.Span | None:
        """A PRODUCER span `send {topic}`, a child of the caller's current span."""
        if not self.enabled:
            return None
        try:
            first = msgs[0]
            rocketmq: dict[str, AttributeValue] = {"message.type": _message_type(first)}
            if len(msgs) == 1:
                rocketmq.update(_message_facts(first))
                if first.delay_level > 0:
                    rocketmq["message.delay_time_level"] = first.delay_level
                if first.deliver_at_ms is not None:
                    rocketmq["message.delivery_timestamp"] = first.deliver_at_ms
            attributes = messaging(
                "send",
                operation_type="send",
                destination=topic,
                message_id=msg_ids[0] if len(msgs) == 1 else "",
                batch_count=len(msgs),
                client_id=self._client_id,
                rocketmq=rocketmq,
            )
            span = self._tracer.start_span(
                f"send {topic}", kind=SpanKind.PRODUCER, attributes=attributes
            )
            if len(msgs) > 1:  # no per-message attribute for a batch: its ids in one event
                span.add_event(BATCH_EVENT, {BATCH_IDS: ",".join(msg_ids)})
            return span
        except Exception:  # noqa: BLE001 - _failed logs it, once
            _failed("send span")
            return None

    def inject(self, span: trace.Span | None, carrier: MutableMapping[str, str]) -> None:
        """Writes the span's W3C context (traceparent, tracestate) into message properties."""
        if span is None:
            return
        try:
            propagate.inject(carrier, context=trace.set_span_in_context(span))
        except Exception:  # noqa: BLE001 - _failed logs it, once
            _failed("inject")

    @staticmethod
    def end(
        span: trace.Span | None,
        error: BaseException | None = None,
        *,
        address: str = "",
        queue_id: int | None = None,
        error_type: str = "",
    ) -> None:
        """Ends `span`; `error` (an exception) or `error_type` (e.g. a listener's
        RECONSUME_LATER) mark it failed with error.type."""
        if span is None:
            return
        try:
            if error_type and error is None:
                span.set_attribute("error.type", error_type)
                span.set_status(Status(StatusCode.ERROR))
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
        except Exception:  # noqa: BLE001 - _failed logs it, once
            _failed("end")

    def start_transaction(
        self,
        operation: str,
        group: str,
        msg_id: str,
        resolution: str,
        carrier: Mapping[str, str],
    ) -> trace.Span | None:
        """A CLIENT span `{operation}` (end_transaction, check_transaction_state) in the trace
        of the message, whose context `carrier` (its properties) holds; end it with end()."""
        if not self.enabled:
            return None
        try:
            attributes = messaging(
                operation,
                message_id=msg_id,
                client_id=self._client_id,
                rocketmq={"client_group": group, "transaction.resolution": resolution},
            )
            return self._in_trace_of(carrier, operation, SpanKind.CLIENT, attributes)
        except Exception:  # noqa: BLE001 - _failed logs it, once
            _failed("transaction span")
            return None

    def start_reply(
        self, topic: str, msg_id: str, correlation_id: str, request: Mapping[str, str]
    ) -> trace.Span | None:
        """A PRODUCER span `send {topic}` for a reply, in the trace of its request (whose
        context `request`, its properties, holds); end it with end()."""
        if not self.enabled:
            return None
        try:
            attributes = messaging(
                "send",
                operation_type="send",
                destination=topic,
                message_id=msg_id,
                conversation_id=correlation_id,
                client_id=self._client_id,
            )
            return self._in_trace_of(request, f"send {topic}", SpanKind.PRODUCER, attributes)
        except Exception:  # noqa: BLE001 - _failed logs it, once
            _failed("reply span")
            return None

    def _in_trace_of(
        self, carrier: Mapping[str, str], name: str, kind: SpanKind, attributes: dict[str, Any]
    ) -> trace.Span:
        """A span in the trace whose context a message's properties (`carrier`) hold."""
        return self._tracer.start_span(
            name,
            context=propagate.extract(carrier) if "traceparent" in carrier else None,
            kind=kind,
            attributes=attributes,
        )

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
                    attributes=messaging(
                        "receive",
                        operation_type="receive",
                        destination=topic,
                        consumer_group=group,
                        batch_count=len(batch),
                        batching=True,
                        rocketmq={"consumption_model": model.lower()},
                    ),
                )
                span.end(time.time_ns())
        except Exception:  # noqa: BLE001 - _failed logs it, once
            _failed("receive span")

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
            rocketmq: dict[str, AttributeValue] = {"consumption_model": model.lower()}
            one = msgs[0] if len(msgs) == 1 else None
            if one is not None:
                rocketmq["message.reconsume_times"] = one.reconsume_times
                rocketmq.update(_message_facts(one))
            attributes = messaging(
                "process",
                operation_type="process",
                destination=topic,
                consumer_group=group,
                message_id=one.msg_id if one is not None else "",
                batch_count=len(msgs),
                batching=True,
                rocketmq=rocketmq,
            )
            parent = None
            # one message: its creation context is the parent too (the conventions allow it),
            # so that the producer's trace shows where the message was processed
            if one is not None and links:
                parent = trace.set_span_in_context(trace.NonRecordingSpan(links[0].context))
            return self._tracer.start_span(
                f"process {topic}",
                context=parent,
                kind=SpanKind.CONSUMER,
                links=links,
                attributes=attributes,
            )
        except Exception:  # noqa: BLE001 - _failed logs it, once
            _failed("process span")
            return None


_FAILURES: set[str] = set()
_PROCESS: dict[str, Tracing] = {}


def process_tracing(service_name: str) -> Tracing:
    """A Tracing for code that runs where no application configures OpenTelemetry (the Python
    workers of Spark executors): the SDK is set up from the OTEL_* variables once per process,
    unless a provider is there already; without those variables (or without the
    OpenTelemetry SDK installed) it stays off."""
    tracing = _PROCESS.get(service_name)
    if tracing is None:
        from ferry.client.tracing_setup import enable_from_environment

        enable_from_environment(service_name)
        tracing = _PROCESS[service_name] = Tracing()
    return tracing


def _failed(what: str) -> None:
    """An instrumentation error: logged once per kind, and the message path goes on."""
    if what not in _FAILURES:
        _FAILURES.add(what)
        log.warning("tracing: %s failed (logged once)", what, exc_info=True)


def _message_facts(msg: Message) -> dict[str, AttributeValue]:
    """A single message's tag and keys, those it has, by their messaging.rocketmq. names."""
    facts: dict[str, AttributeValue] = {}
    if msg.tags:
        facts["message.tag"] = msg.tags
    if msg.keys:
        facts["message.keys"] = list(msg.keys)
    return facts


def _message_type(msg: Message) -> str:
    if msg.delay_level > 0 or msg.deliver_at_ms is not None:
        return "delay"
    if msg.properties.get("TRAN_MSG") == "true":
        return "transaction"
    return "normal"
