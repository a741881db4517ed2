"""A consumer's answer to a request, for asyncio: `await consumer.reply(msg, body)`.

As ferry.client.replier: the reply goes to the broker the request came through, and a failure
the broker calls retriable is tried again there within the timeout. The reply is built by
request_reply.prepare_reply, shared with the sync SDK; only the waiting is asyncio's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from ferry.client.aio.instance import AsyncClientInstance
from ferry.client.message import Message, SendResult
from ferry.client.replier import RETRY_PAUSE_S
from ferry.client.request_reply import prepare_reply, reply_result
from ferry.client.transport import expect
from ferry.protocol.errors import FerryError, RequestTimeoutError
from ferry.protocol.messages import SendMessageReply


async def send_reply(
    inst: AsyncClientInstance,
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
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimeoutError(f"reply not taken by {broker} in {timeout_s:g}s")
            try:
                result = await inst.connection(broker).request(
                    prepared.target.request,
                    [prepared.payload],
                    timeout_s=remaining,
                    traceparent=prepared.traceparent,
                    tracestate=prepared.tracestate,
                )
                stored = expect(result, SendMessageReply)
                break
            except FerryError as err:
                if not err.retriable or deadline - time.monotonic() <= RETRY_PAUSE_S:
                    raise
            await asyncio.sleep(RETRY_PAUSE_S)  # retriable: the broker busy or reconnecting
    except FerryError as err:
        inst.tracing.end(prepared.span, err)
        raise
    inst.tracing.end(prepared.span, address=broker, queue_id=stored.queue_id)
    return reply_result(prepared, stored)
