"""The calls RocketMQ's tools make on a consumer through the broker (mqadmin consumerStatus
and consumerRunningInfo, the dashboard's client page): the broker asks the client over the
client's own connection and relays its answer, as RocketMQ's broker does.

- GET_CONSUMER_RUNNING_INFO (307; consumerGroup, clientId, jstackEnable): the client answers
  with its ConsumerRunningInfo (properties, subscriptions, per-queue process state, stats);
- CONSUME_MESSAGE_DIRECTLY (309; consumerGroup, clientId, msgId): the broker reads the
  message at msgId (an offset message id) and sends it as the body; the client runs its
  listener on it and answers a ConsumeMessageDirectlyResult.

The client is found by the connection its latest heartbeat came on (consume.DoorClients). A
client with none here (not connected, or one of Ferry's own clients, which a broker cannot
call) is answered SYSTEM_ERROR "not online", as RocketMQ answers; one that does not answer
within ASK_TIMEOUT_S, SYSTEM_ERROR saying so. Each needs the permission to read the group's
members (GET_CONSUMER_CONNECTION_LIST's)."""

from __future__ import annotations

from ferry.protocol import record
from ferry.protocol.messages import (
    AnyReply,
    ErrorReply,
    GetConsumerConnectionListRequest,
    ViewMessageRequest,
)
from ferry.protocol.rocketmq.codes import RequestCode, ResponseCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.protocol.rocketmq.fields import ext
from ferry.remoting.calls import Handler
from ferry.remoting.door.asks import Asks
from ferry.remoting.door.consume import DoorClients
from ferry.runtime.call import Payload
from ferry.runtime.remoting_auth import ACCESS_KEY, SIGNATURE
from ferry.runtime.remoting_door import DoorCall, Route

_TOOL_ONLY = frozenset((ACCESS_KEY, SIGNATURE, "OnsChannel", "SecurityToken"))
# under the tools' own wait (mqadmin's is 5 s or more), so they get the broker's reason
ASK_TIMEOUT_S = 4.0


def _ask_client(clients: DoorClients, cmd: RemotingCommand, call: DoorCall, body: bytes) -> None:
    """Asks the client named by the request, with `body`, and relays its answer."""
    group, client_id = ext(cmd, "consumerGroup"), ext(cmd, "clientId")
    conn = clients.connection(call.door, client_id)
    if conn is None:
        call.relay(
            cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{group}> <{client_id}> not online: no RocketMQ-protocol "
                "connection of it here (Ferry's own clients cannot be called)",
            )
        )
        return
    # the tool's own credentials are not passed on to the client
    fields = {k: v for k, v in cmd.ext_fields.items() if k not in _TOOL_ONLY}
    asked = RemotingCommand(
        code=cmd.code, ext_fields=fields, body=body, serialize_type=cmd.serialize_type
    )

    def on_answer(answer: RemotingCommand | None) -> None:
        if answer is None:
            call.relay(
                cmd.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"consumer <{client_id}> did not answer request {cmd.code} within "
                    f"{ASK_TIMEOUT_S:.0f} s",
                )
            )
            return
        call.relay(
            cmd.response(
                answer.code, answer.remark, ext_fields=dict(answer.ext_fields), body=answer.body
            )
        )

    call.door.ask(conn, asked, on_answer, ASK_TIMEOUT_S)


def _permitted(cmd: RemotingCommand, call: DoorCall) -> bool:
    request = GetConsumerConnectionListRequest(consumer_group=ext(cmd, "consumerGroup"))
    refused = call.permitted(request)
    if refused is not None:
        call.fail(refused)
        return False
    return True


def _unused(cmd: RemotingCommand, _reply: object, _p: object) -> RemotingCommand:
    # only an ErrorReply comes here (handled by the door); answers are relayed
    return cmd.response(ResponseCode.SYSTEM_ERROR, "no answer")


def _running_info(clients: DoorClients) -> Route:
    def request(cmd: RemotingCommand, call: DoorCall) -> None:
        if _permitted(cmd, call):
            _ask_client(clients, cmd, call, b"")

    return Route(request, _unused)


def _consume_directly(clients: DoorClients, asks: Asks) -> Route:
    def request(cmd: RemotingCommand, call: DoorCall) -> None:
        if not _permitted(cmd, call):
            return
        msg_id = ext(cmd, "msgId")
        try:
            _host, offset = record.decode_offset_msg_id(msg_id)
        except record.RecordError as exc:
            call.relay(cmd.response(ResponseCode.SYSTEM_ERROR, str(exc)))
            return

        def read(reply: AnyReply, payload: Payload) -> None:
            raw = b"".join(bytes(p) for p in payload)
            if isinstance(reply, ErrorReply) or not raw:
                why = reply.message if isinstance(reply, ErrorReply) else "nothing there"
                call.relay(cmd.response(ResponseCode.SYSTEM_ERROR, f"message {msg_id}: {why}"))
                return
            _ask_client(clients, cmd, call, raw)

        asks.one(call, ViewMessageRequest(phys_offset=offset), read)

    return Route(request, _unused)


def routes(clients: DoorClients, handlers: dict[type, Handler]) -> dict[int, Route]:
    return {
        RequestCode.GET_CONSUMER_RUNNING_INFO: _running_info(clients),
        RequestCode.CONSUME_MESSAGE_DIRECTLY: _consume_directly(clients, Asks(handlers)),
    }
