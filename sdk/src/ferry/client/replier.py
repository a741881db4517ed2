"""A consumer's answer to a request: `consumer.reply(msg, body)`.

The reply goes to the broker the request came through (its REPLY_TO_BROKER property), where
the requester polls, as a SendReplyRequest to the cluster's reply topic (built by
request_reply.prepare_reply). A failure the broker calls retriable (busy, connection lost) is
tried again at the same broker within the timeout: no other broker holds the requester's poll.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ferry.client.instance import ClientInstance
from ferry.client.message import Message, SendResult
from ferry.client.request_reply import PreparedReply, prepare_reply, reply_result
from ferry.client.transport import expect
from ferry.protocol.errors import FerryError, RequestTimeoutError
from ferry.protocol.messages import SendMessageReply

RETRY_PAUSE_S = 0.05


def send_reply(
    inst: ClientInstance,
    group: str,
    request: Message,
    body: bytes | bytearray | memoryview | str,
    properties: Mapping[str, str] | None,
    timeout_s: float,
) -> SendResult:
    prepared = prepare_reply(
        inst.msg_ids, inst.born_host, inst.tracing, group, request, body, properties
    )
    broker = prepared.target.broker_addr
    try:
        stored = _send(inst, prepared, timeout_s)
    except FerryError as err:
        inst.tracing.end(prepared.span, err)
        raise
    inst.tracing.end(prepared.span, address=broker, queue_id=stored.queue_id)
    return reply_result(prepared, stored)


def _send(inst: ClientInstance, prepared: PreparedReply, timeout_s: float) -> SendMessageReply:
    broker = prepared.target.broker_addr
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimeoutError(f"reply not taken by {broker} in {timeout_s:g}s")
        try:
            result = inst.connection(broker).request(
                prepared.target.request,
                [prepared.payload],
                timeout_s=remaining,
                traceparent=prepared.traceparent,
                tracestate=prepared.tracestate,
                direct=True,
            )
            return expect(result, SendMessageReply)
        except FerryError as err:
            if not err.retriable or deadline - time.monotonic() <= RETRY_PAUSE_S:
                raise
        time.sleep(RETRY_PAUSE_S)  # a retriable failure: the broker busy or reconnecting
