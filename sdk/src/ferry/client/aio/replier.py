"""A consumer's answer to a request, for asyncio: `await consumer.reply(msg, body)`.

As ferry.client.replier, whose ReplySend builds the reply and holds the retry rules: the reply
goes to the broker the request came through, and a failure the broker calls retriable is
tried again there within the timeout. Only the waiting is asyncio's."""

from __future__ import annotations

import asyncio

from ferry.client.aio.instance import AsyncClientInstance
from ferry.client.message import SendResult
from ferry.client.replier import RETRY_PAUSE_S, ReplySend
from ferry.client.transport import expect
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import SendMessageReply


async def send_reply(inst: AsyncClientInstance, reply: ReplySend) -> SendResult:
    try:
        stored = await _send(inst, reply)
    except FerryError as err:
        reply.failed(err)
        raise
    return reply.done(stored)


async def _send(inst: AsyncClientInstance, reply: ReplySend) -> SendMessageReply:
    prepared = reply.prepared
    while True:
        remaining = reply.remaining()
        try:
            result = await inst.connection(reply.broker).request(
                prepared.target.request,
                [prepared.payload],
                timeout_s=remaining,
                traceparent=prepared.traceparent,
                tracestate=prepared.tracestate,
            )
            return expect(result, SendMessageReply)
        except FerryError as err:
            if not reply.may_retry(err):
                raise
        await asyncio.sleep(RETRY_PAUSE_S)  # retriable: the broker busy or reconnecting
