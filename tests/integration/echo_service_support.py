"""A real ROUTER service on 127.0.0.1 for the SDK transports' tests (sync and asyncio)."""

from __future__ import annotations

import threading

from ferry.protocol.errors import MessageIllegalError, TopicNotExistError
from ferry.protocol.messages import (
    ConsumerIdsChangedNotice,
    GetMaxOffsetRequest,
    GetRouteInfoRequest,
    HeartbeatRequest,
    OffsetReply,
    OkReply,
    SendMessageReply,
    SendMessageRequest,
)
from ferry.runtime.service import Call, Service


class EchoServer:
    """A real service: offsets echo the queue id, sends echo their payload, some requests are
    held forever and some fail with a typed error."""

    def __init__(self) -> None:
        self.service = Service("echo")
        self.held: list[Call] = []
        self.service.on(GetMaxOffsetRequest, self._max_offset)
        self.service.on(GetRouteInfoRequest, self._hold)
        self.service.on(SendMessageRequest, self._send)
        self.service.on(HeartbeatRequest, self._heartbeat)
        self.endpoint = self.service.bind_router("tcp://127.0.0.1:0")
        self.address = self.endpoint.removeprefix("tcp://")
        self.thread = threading.Thread(
            target=self.service.run, kwargs={"handle_signals": False}, daemon=True
        )

    def _max_offset(self, req: GetMaxOffsetRequest, _call: Call) -> OffsetReply:
        if req.topic == "missing":
            raise TopicNotExistError(f"No route info of this topic: {req.topic}")
        if req.topic == "illegal":
            raise MessageIllegalError("bad message")
        return OffsetReply(offset=req.queue_id * 7)

    def _heartbeat(self, req: HeartbeatRequest, call: Call) -> OkReply:
        """Answers, then sends a notice unasked, as a broker does when a group changes."""
        notice = ConsumerIdsChangedNotice(consumer_group=req.client_id)
        self.service.later(
            0, lambda: self.service.send_reply(call._socket, call.routing, 0, notice)
        )
        return OkReply()

    def _hold(self, _req: GetRouteInfoRequest, call: Call) -> None:
        self.held.append(call)

    def _send(self, req: SendMessageRequest, call: Call) -> tuple[SendMessageReply, list[bytes]]:
        body = b"".join(bytes(f) for f in call.payload)
        reply = SendMessageReply(
            status=0,
            queue_id=req.queue_id,
            queue_offset=len(body),
            store_host="127.0.0.1:1",
            phys_offsets=[0],
            broker_name=call.traceparent,
        )
        return reply, [body[::-1]]
