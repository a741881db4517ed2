"""apache.rocketmq.v2.MessagingService on grpc.aio: the calls the proxy serves, and a Status
for every other one.

Every reply carries a Status (the client takes a reply without one, or with code 0, as
illegal). A handler that fails unexpectedly answers INTERNAL_ERROR and the proxy keeps
serving; a call the proxy does not serve yet answers NOT_IMPLEMENTED naming it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from ferry.protocol.errors import FerryError
from ferry.protocol.names import check_topic
from ferry.proxy import consuming, convert, delivery, transactions
from ferry.proxy.consuming import Popper
from ferry.proxy.errors import ProxyError, status_of
from ferry.proxy.groups import GroupConfigs
from ferry.proxy.protocol import SERVICE, ClientType, Code, Method, Pb, methods
from ferry.proxy.registry import CONSUMER_TYPES, ConsumerRegistry, consumer_settings
from ferry.proxy.renew import Renewer
from ferry.proxy.routes import RouteLookup, route_queues
from ferry.proxy.sending import SERVED_TYPES, Sender, send_all
from ferry.proxy.transactions import Transactions

log = logging.getLogger("ferry.proxy.service")

Unary = Callable[[Pb, Any], Awaitable[Pb]]
Streaming = Callable[[AsyncIterator[Pb], Any], AsyncIterator[Pb]]
ServerStreaming = Callable[[Pb, Any], AsyncIterator[Pb]]
CLIENT_ID = "x-mq-client-id"


class MessagingService:
    """The handlers; `where` is the proxy's own address, named in routes when the client's
    request names none."""

    def __init__(
        self,
        producer: Sender,
        popper: Popper,
        routes: RouteLookup,
        settings: convert.ServerSettings,
        where: tuple[str, int],
        transactions: Transactions,
        renewer: Renewer,
    ) -> None:
        self._producer = producer
        self._transactions = transactions
        self._popper = popper
        self._renewer = renewer
        self._groups = GroupConfigs(popper)
        self._consumers = ConsumerRegistry(popper)
        self._routes = routes
        self._settings = settings
        self._where = where

    # ---- the calls ----

    async def query_route(self, request: Pb, _context: Any) -> Pb:
        topic = convert.topic_name(request.topic)
        try:
            check_topic(topic)
        except FerryError as err:
            raise ProxyError(Code.ILLEGAL_TOPIC, err.message) from None
        route = await self._routes.route(topic)
        queues = route_queues(route, tuple(int(t) for t in SERVED_TYPES))
        where = request.endpoints if len(request.endpoints.addresses) else None
        if where is None:
            where = convert.endpoints(*self._where)
        return convert.route_response(request.topic, queues, where)

    async def heartbeat(self, request: Pb, context: Any) -> Pb:
        """A consumer's heartbeat also registers its group with Ferry's brokers."""
        client_id = _client_id(context)
        if int(request.client_type) not in {int(t) for t in ClientType}:
            raise ProxyError(
                Code.UNRECOGNIZED_CLIENT_TYPE, f"client type {request.client_type} is unknown"
            )
        if int(request.client_type) in CONSUMER_TYPES and request.HasField("group"):
            group = delivery.group_name(request.group)
            self._renewer.heard(client_id)
            await self._consumers.heartbeat(client_id, group, _peer_host(context))
        return METHODS["Heartbeat"].reply(Code.OK, convert.OK_STATUS_TEXT)

    async def send_message(self, request: Pb, context: Any) -> Pb:
        messages = [convert.inbound(m) for m in request.messages]
        if not messages:
            raise ProxyError(Code.BAD_REQUEST, "SendMessage carries no message")
        halves = self._transactions.sender(_metadata(context).get(CLIENT_ID, ""))
        entries = await send_all(self._producer, messages, self._settings.max_body_size, halves)
        return convert.send_response(entries)

    async def end_transaction(self, request: Pb, _context: Any) -> Pb:
        return await self._transactions.end(request)

    async def receive_message(self, request: Pb, context: Any) -> AsyncIterator[Pb]:
        client_id = _client_id(context)
        async for reply in consuming.receive(
            self._popper, self._renewer, request, context, client_id
        ):
            yield reply

    async def ack_message(self, request: Pb, _context: Any) -> Pb:
        return await consuming.ack(self._popper, self._renewer, request)

    async def change_invisible_duration(self, request: Pb, _context: Any) -> Pb:
        return await consuming.change_invisible(self._popper, self._renewer, request)

    async def forward_message_to_dead_letter_queue(self, request: Pb, _context: Any) -> Pb:
        return await consuming.forward_to_dlq(self._popper, self._renewer, request)

    async def query_assignment(self, request: Pb, _context: Any) -> Pb:
        accepted = tuple(int(t) for t in SERVED_TYPES)
        return await consuming.query_assignment(self._popper, request, self._where, accepted)

    async def notify_client_termination(self, request: Pb, context: Any) -> Pb:
        if request.HasField("group") and request.group.name:
            group = delivery.group_name(request.group)
            self._renewer.drop_client(_client_id(context))
            await self._consumers.terminated(_client_id(context), group)
        return METHODS["NotifyClientTermination"].reply(Code.OK, convert.OK_STATUS_TEXT)

    async def telemetry(self, commands: AsyncIterator[Pb], context: Any) -> AsyncIterator[Pb]:
        """The client's Settings answered with the server's; the broker's transaction checks
        pushed down it (transactions.py); other commands (a thread dump, a verify result the
        proxy never asked for) are logged and dropped, or refused with BAD_REQUEST before the
        Settings (as is a stream that ends without them)."""
        client_id = _client_id(context)
        pushed = self._transactions.stream_opened(client_id)
        settled = refused = False  # the client's Settings seen; a command before them refused
        # a stream left open and silent is held, never timed out: rocketmq-python-client 5.1.2
        # rebuilds its stream after a failed write and sends Settings on it only at its next
        # sync (every 300 s), so a deadline would cut it off at every rebuild
        try:
            async for command, from_client in transactions.interleave(commands, pushed):
                kind = command.WhichOneof("command")
                if not from_client:
                    yield command
                elif kind == "settings":
                    settled = True
                    self._consumers.settings_seen(client_id, command.settings)
                    self._transactions.settings_seen(client_id, command.settings)
                    yield await self._settings_reply(command.settings)
                elif not settled:
                    refused = True
                    yield _no_settings(f"{kind or 'an empty command'} before the client's Settings")
                else:
                    log.debug("telemetry from %s: %s ignored", client_id, kind)
            if not settled and not refused:
                yield _no_settings("the stream ended without the client's Settings")
        finally:
            self._transactions.stream_closed(client_id, pushed)
            self._consumers.stream_closed(client_id)
            self._renewer.drop_client(client_id)

    async def _settings_reply(self, settings: Pb) -> Pb:
        """The server's settings; a consumer's carry its group's retryMaxTimes and whether
        it is a FIFO group."""
        consumer = consumer_settings(settings)
        if consumer is None:
            return convert.settings_command(settings, self._settings)
        config = await self._groups.get(consumer.group, list(consumer.subscriptions))
        attempts = config.retry_max_times + 1
        fifo = config.consume_message_orderly
        return convert.settings_command(settings, self._settings, attempts, fifo)

    # ---- the table grpc serves ----

    def handler(self) -> grpc.GenericRpcHandler:
        """Every method of the service: the ones above, and a Status for the others."""
        served: dict[str, Unary] = {
            "QueryRoute": self.query_route,
            "Heartbeat": self.heartbeat,
            "SendMessage": self.send_message,
            "NotifyClientTermination": self.notify_client_termination,
            "AckMessage": self.ack_message,
            "ChangeInvisibleDuration": self.change_invisible_duration,
            "QueryAssignment": self.query_assignment,
            "ForwardMessageToDeadLetterQueue": self.forward_message_to_dead_letter_queue,
            "EndTransaction": self.end_transaction,
        }
        streams: dict[str, Streaming] = {"Telemetry": self.telemetry}
        server_streams: dict[str, ServerStreaming] = {"ReceiveMessage": self.receive_message}
        handlers = {}
        for name, method in METHODS.items():
            serdes = {
                "request_deserializer": _parser(method),
                "response_serializer": method.response.SerializeToString,
            }
            if name in served:
                handlers[name] = grpc.unary_unary_rpc_method_handler(
                    _guarded(method, served[name]), **serdes
                )
            elif name in server_streams:
                handlers[name] = grpc.unary_stream_rpc_method_handler(
                    _guarded_server_stream(method, server_streams[name]), **serdes
                )
            elif name in streams:
                handlers[name] = grpc.stream_stream_rpc_method_handler(
                    _guarded_stream(method, streams[name]), **serdes
                )
            else:
                handlers[name] = _not_served(method, serdes)
        return grpc.method_handlers_generic_handler(SERVICE, handlers)


METHODS = methods()


def _metadata(context: Any) -> dict[str, Any]:
    return {str(k): v for k, v in (context.invocation_metadata() or ())}


def _no_settings(text: str) -> Pb:
    return METHODS["Telemetry"].reply(Code.BAD_REQUEST, f"{text}: send Settings first")


def _client_id(context: Any) -> str:
    client_id = _metadata(context).get(CLIENT_ID)
    if not client_id:
        raise ProxyError(Code.CLIENT_ID_REQUIRED, f"the call has no {CLIENT_ID} metadata")
    return str(client_id)


def _peer_host(context: Any) -> str:
    """The client's address as grpc names it ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000")."""
    peer = str(context.peer() or "")
    _, _, where = peer.partition(":")
    host = where.rsplit(":", 1)[0] if ":" in where else where
    return host.strip("[]")


def _failure(method: Method, err: Exception) -> tuple[Code, str]:
    if isinstance(err, ProxyError):
        return err.code, err.message
    if isinstance(err, FerryError):
        return status_of(err)
    log.exception("%s failed", method.name, exc_info=err)
    return Code.INTERNAL_ERROR, f"{method.name} failed in the proxy: {type(err).__name__}"


class Malformed:
    """A request body that is not its protobuf message: answered BAD_REQUEST by the guards
    (grpc's own answer to a deserializer's failure is an untyped UNKNOWN)."""

    def __init__(self, method: Method, err: Exception) -> None:
        self.error = ProxyError(
            Code.BAD_REQUEST, f"the body is not a valid {method.request.__name__}: {err}"
        )


def _parser(method: Method) -> Callable[[bytes], Pb]:
    def parse(data: bytes) -> Pb:
        try:
            return method.request.FromString(data)
        except Exception as err:  # noqa: BLE001 - DecodeError, or a recursion limit
            return Malformed(method, err)

    return parse


async def _well_formed(requests: AsyncIterator[Pb]) -> AsyncIterator[Pb]:
    async for request in requests:
        if isinstance(request, Malformed):
            raise request.error
        yield request


def _guarded(method: Method, fn: Unary) -> Unary:
    async def call(request: Pb, context: Any) -> Pb:
        try:
            if isinstance(request, Malformed):
                raise request.error
            return await fn(request, context)
        except Exception as err:  # noqa: BLE001 - answered with its Status, logged if unknown
            return method.reply(*_failure(method, err))

    return call


def _guarded_stream(method: Method, fn: Streaming) -> Streaming:
    async def call(requests: AsyncIterator[Pb], context: Any) -> AsyncIterator[Pb]:
        try:
            async for reply in fn(_well_formed(requests), context):
                yield reply
        except Exception as err:  # noqa: BLE001 - answered with its Status, logged if unknown
            yield method.reply(*_failure(method, err))

    return call


def _guarded_server_stream(method: Method, fn: ServerStreaming) -> ServerStreaming:
    """A failure before the first reply is the stream's Status; one after it (the Status
    went first) ends the stream, logged."""

    async def call(request: Pb, context: Any) -> AsyncIterator[Pb]:
        sent = False
        try:
            if isinstance(request, Malformed):
                raise request.error
            async for reply in fn(request, context):
                sent = True
                yield reply
        except Exception as err:  # noqa: BLE001 - answered with its Status, logged if unknown
            if sent:
                log.warning("%s failed after its Status: %s", method.name, err)
                return
            yield method.reply(*_failure(method, err))

    return call


def _not_served(method: Method, serdes: dict[str, Any]) -> grpc.RpcMethodHandler:
    text = f"{method.name} is not served by this proxy yet"

    async def unary(_request: Pb, _context: Any) -> Pb:
        return method.reply(Code.NOT_IMPLEMENTED, text)

    async def stream(_request: Pb, _context: Any) -> AsyncIterator[Pb]:
        yield method.reply(Code.NOT_IMPLEMENTED, text)

    async def duplex(_requests: AsyncIterator[Pb], _context: Any) -> AsyncIterator[Pb]:
        yield method.reply(Code.NOT_IMPLEMENTED, text)

    if method.client_streaming and method.server_streaming:
        return grpc.stream_stream_rpc_method_handler(duplex, **serdes)
    if method.client_streaming:
        return grpc.stream_unary_rpc_method_handler(unary, **serdes)
    if method.server_streaming:
        return grpc.unary_stream_rpc_method_handler(stream, **serdes)
    return grpc.unary_unary_rpc_method_handler(unary, **serdes)
