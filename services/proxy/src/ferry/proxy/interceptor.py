"""The grpc.aio interceptor that runs ferry.proxy.auth's checks before every handler of
MessagingService (served or not), whatever the call's shape: a refused unary call is answered
with its Status, a refused server stream sends one reply with it, and Telemetry is
authenticated when it opens and authorized command by command (a refused command ends the
stream with its Status). A check that fails unexpectedly answers INTERNAL_ERROR, logged."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from ferry.protocol.auth import Credentials
from ferry.proxy import access
from ferry.proxy.auth import CallChecker, Refused
from ferry.proxy.protocol import Code, Method, Pb, methods
from ferry.runtime.security.guard import Guard, Users

log = logging.getLogger("ferry.proxy.auth")

METHODS = methods()

Unary = Callable[[Pb, Any], Awaitable[Pb]]


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps every MessagingService handler (served or not) in the checks above."""

    def __init__(self, checker: CallChecker) -> None:
        self._checker = checker

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        name = str(handler_call_details.method).rsplit("/", 1)[-1]
        method = METHODS.get(name)
        if handler is None or method is None:
            return handler  # not this service's: grpc answers UNIMPLEMENTED
        return self._wrap(method, handler)

    def _wrap(self, method: Method, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        serdes = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary), **serdes
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._server_stream(method, handler.unary_stream), **serdes
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._duplex(method, handler.stream_stream), **serdes
            )
        return grpc.stream_unary_rpc_method_handler(
            self._client_stream(method, handler.stream_unary), **serdes
        )

    def _check(self, method: Method, request: Pb, context: Any) -> tuple[Code, str] | None:
        """None when the call may run; else its refusal."""
        return _refusal(
            method,
            lambda: self._checker.authorize(
                self._checker.authenticate(method.name, context),
                method.name,
                access.needs(method.name, request),
                context,
            ),
        )

    def _unary(self, method: Method, fn: Any) -> Unary:
        async def call(request: Pb, context: Any) -> Pb:
            refused = self._check(method, request, context)
            if refused is not None:
                return method.reply(*refused)
            return await fn(request, context)

        return call

    def _client_stream(self, method: Method, fn: Any) -> Any:
        async def call(requests: AsyncIterator[Pb], context: Any) -> Pb:
            refused = self._check(method, None, context)
            if refused is not None:
                return method.reply(*refused)
            return await fn(requests, context)

        return call

    def _server_stream(self, method: Method, fn: Any) -> Any:
        async def call(request: Pb, context: Any) -> AsyncIterator[Pb]:
            refused = self._check(method, request, context)
            if refused is not None:
                yield method.reply(*refused)
                return
            async for reply in fn(request, context):
                yield reply

        return call

    def _duplex(self, method: Method, fn: Any) -> Any:
        """Telemetry: the stream is authenticated when it opens; each command is authorized
        before the handler sees it, and a refused one ends the stream with its Status."""
        checker = self._checker

        async def call(commands: AsyncIterator[Pb], context: Any) -> AsyncIterator[Pb]:
            who: list[tuple[str, Any]] = []
            refused = _refusal(
                method, lambda: who.append(checker.authenticate(method.name, context))
            )
            if refused is not None:
                yield method.reply(*refused)
                return
            ended: list[tuple[Code, str]] = []

            def allowed(command: Pb) -> None:
                checker.authorize(who[0], method.name, access.telemetry_needs(command), context)

            async def checked() -> AsyncIterator[Pb]:
                async for command in commands:
                    refused = _refusal(method, functools.partial(allowed, command))
                    if refused is not None:
                        ended.append(refused)
                        return
                    yield command

            replies = fn(checked(), context)
            try:
                async for reply in replies:
                    if ended:  # what the handler says of the cut stream is not sent
                        break
                    yield reply
            finally:
                await replies.aclose()
            if ended:
                yield method.reply(*ended[0])

        return call


def _refusal(method: Method, check: Callable[[], object]) -> tuple[Code, str] | None:
    """None when `check` passes; else the Code and message the call is answered with."""
    try:
        check()
    except Refused as refused:
        return refused.code, refused.message
    except Exception:  # a check that fails refuses, logged
        log.exception("checking %s failed", method.name)
        return Code.INTERNAL_ERROR, f"{method.name}: the proxy could not check the call"
    return None


def call_checks(
    service: str, inner: Credentials, authorization: bool, users: Users
) -> AuthInterceptor:
    """The interceptor of a proxy with authenticationEnabled: Ferry's Guard over `users`."""
    guard = Guard(
        service, inner=inner, authorization=authorization, internal_only=False, users=users
    )
    return AuthInterceptor(CallChecker(guard))
