"""A consumer's answer to a request: `consumer.reply(msg, body)`.

The reply goes to the broker the request came through (its REPLY_TO_BROKER property), where
the requester polls, as a SendReplyRequest to the cluster's reply topic (built by
request_reply.prepare_reply). A failure the broker calls retriable (busy, connection lost) is
tried again at the same broker within the timeout: no other broker holds the requester's poll.
ReplySend holds those rules for this module's send_reply and ferry.client.aio's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ferry.client.instance import ClientBase, ClientInstance
from ferry.client.message import Message, SendResult
from ferry.client.request_reply import prepare_reply, reply_result
from ferry.client.transport import expect
from ferry.protocol.errors import FerryError, RequestTimeoutError
from ferry.protocol.messages import SendMessageReply

RETRY_PAUSE_S = 0.05


class ReplySend:
    """One reply, prepared, with its deadline and its send span."""

    def __init__(
        self,
        inst: ClientBase,
        group: str,
        request: Message,
        body: bytes | bytearray | memoryview | str,
        properties: Mapping[str, str] | None,
        timeout_s: float,
    ) -> None:
        self.prepared = prepare_reply(
            inst.msg_ids, inst.born_host, inst.tracing, group, request, body, properties
        )
        self.broker = self.prepared.target.broker_addr
        self._tracing = inst.tracing
        self._timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s

    def remaining(self) -> float:
        """The time left for another try; RequestTimeoutError when there is none."""
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimeoutError(f"reply not taken by {self.broker} in {self._timeout_s:g}s")
        return remaining

    def may_retry(self, err: FerryError) -> bool:
        """After a failed try: whether to try again after RETRY_PAUSE_S."""
        return err.retriable and self._deadline - time.monotonic() > RETRY_PAUSE_S

    def failed(self, err: FerryError) -> None:
        self._tracing.end(self.prepared.span, err)

    def done(self, stored: SendMessageReply) -> SendResult:
        self._tracing.end(self.prepared.span, address=self.broker, queue_id=stored.queue_id)
        return reply_result(self.prepared, stored)


def send_reply(inst: ClientInstance, reply: ReplySend) -> SendResult:
    try:
        stored = _send(inst, reply)
    except FerryError as err:
        reply.failed(err)
        raise
    return reply.done(stored)


def _send(inst: ClientInstance, reply: ReplySend) -> SendMessageReply:
    prepared = reply.prepared
    while True:
        remaining = reply.remaining()
        try:
            result = inst.connection(reply.broker).request(
                prepared.target.request,
                [prepared.payload],
                timeout_s=remaining,
                traceparent=prepared.traceparent,
                tracestate=prepared.tracestate,
                direct=True,
            )
            return expect(result, SendMessageReply)
        except FerryError as err:
            if not reply.may_retry(err):
                raise
        time.sleep(RETRY_PAUSE_S)  # a retriable failure: the broker busy or reconnecting
