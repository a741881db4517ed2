"""The console's composition root: config -> Admin, sampler, trace store, pages -> an ASGI app
served by uvicorn on one socket bound here (so port 0 works and READY names the real port)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ferry.console import (
    broker_pages,
    cluster_pages,
    message_pages,
    producer_pages,
    trace_pages,
)
from ferry.console.config import ConsoleConfig
from ferry.console.login import Login, LoginGate
from ferry.console.sampler import Sampler
from ferry.console.state import Clients, ConsoleState
from ferry.console.trace_store import TraceStore
from ferry.console.web import MAX_FORM_BYTES, Renderer, error_response, make_env
from ferry.protocol.errors import FerryError
from ferry.runtime.service import announce_ready
from ferry.runtime.throttled_log import ThrottleFilter

log = logging.getLogger("ferry.console")
UVICORN_BAD_REQUEST_LINES = (
    "Invalid HTTP request",
    "Unsupported upgrade request",
    "No supported WebSocket library",
)

SERVICE_NAME = "console"
STATIC = Path(__file__).parent / "static"
PARENT_CHECK_S = 0.5


class CatchAll:
    """Turns an exception no handler took into a 500 page; the server goes on."""

    def __init__(self, app: ASGIApp, renderer: Renderer) -> None:
        self.app = app
        self.renderer = renderer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started:  # already answered (and logged) by the 500 handler
                log.debug("%s failed after its answer", scope.get("path"), exc_info=True)
                return
            response = error_response(self.renderer, Request(scope), exc)
            await response(scope, receive, send)


async def healthz(_request: Request) -> Response:
    """The container's health probe: the server answers (the cluster may still be starting)."""
    return PlainTextResponse("ok")


def post(path: str, endpoint: Callable[..., Any], limit: int = MAX_FORM_BYTES) -> Route:
    """A POST route whose body is refused past limit bytes."""
    return Route(path, endpoint, methods=["POST"], max_body_size=limit)


def build_app(state: ConsoleState, login: Login) -> Starlette:
    routes = [
        Route("/healthz", healthz),
        Route("/login", login.login_page),
        post("/login", login.login),
        post("/logout", login.logout),
        Route("/", broker_pages.cluster_page),
        Route("/topics", cluster_pages.topics_page),
        post("/topics", cluster_pages.update_topic),
        Route("/topic/{topic}", cluster_pages.topic_page),
        Route("/groups", cluster_pages.groups_page),
        Route("/group", cluster_pages.group_lookup),
        Route("/group/{group}", cluster_pages.group_page),
        post("/group/{group}/reset", cluster_pages.reset_offset),
        Route("/producers", producer_pages.producers_page),
        Route("/messages", message_pages.messages_page),
        Route("/message/{offset_msg_id}", message_pages.message_page),
        post("/message/{offset_msg_id}/resend", message_pages.resend),
        Route("/dlq", message_pages.dlq_page),
        Route("/traces", trace_pages.traces_page),
        Route("/trace/{trace_id}", trace_pages.trace_page),
        Route("/trace/message/{msg_id}", trace_pages.message_trace_page),
        Route("/api/trace/message/{msg_id}", trace_pages.message_trace_api),
        post("/v1/traces", trace_pages.receive_traces, state.config.otlp_max_request_bytes),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]

    def on_error(request: Request, exc: Exception) -> Response:
        return error_response(state.renderer, request, exc)

    app = Starlette(
        routes=routes,
        # Exception: Starlette renders it (our 500 page), then re-raises it for the server
        exception_handlers={FerryError: on_error, HTTPException: on_error, Exception: on_error},
    )
    app.state.console = state
    return app


def advertised(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0", "::", "*") else host


class ConsoleApp:
    def __init__(self, config: ConsoleConfig) -> None:
        self.config = config
        # the console's own clients: the sampler's, and the pages' when no login is needed
        clients = Clients(config, config.credentials(), config.server_key())
        traces = TraceStore(
            config.data_dir / "traces.sqlite3",
            max_bytes=config.trace_store_max_bytes,
            retention_ms=config.trace_retention_hours * 3600_000,
        )
        sampler = Sampler(
            clients.admin,
            interval_s=config.sample_interval_ms / 1000,
            slots=config.sample_slots,
            max_topics=config.max_sampled_topics,
            max_groups=config.max_sampled_groups,
        )
        renderer = Renderer(make_env(), {"namesrv": config.namesrv_addr})
        self.state = ConsoleState(config, clients, sampler, traces, renderer)
        self.login = Login(self.state)
        gate = LoginGate(build_app(self.state, self.login), self.login, renderer)
        self.app = CatchAll(gate, renderer)

    def run(self) -> None:
        # uvicorn logs a line per malformed request: anyone could fill the log with them
        logging.getLogger("uvicorn.error").addFilter(ThrottleFilter(UVICORN_BAD_REQUEST_LINES))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.config.listen_host, self.config.listen_port))
        sock.listen(128)
        port = sock.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                log_config=None,
                access_log=False,
                limit_concurrency=self.config.max_concurrent_requests,
                timeout_keep_alive=5,
                h11_max_incomplete_event_size=64 * 1024,
            )
        )
        self.state.clients.start()
        self.state.sampler.start()
        addr = f"{advertised(self.config.listen_host)}:{port}"
        try:
            asyncio.run(self._serve(server, sock, addr))
        finally:
            self.state.sampler.stop()
            self.login.close()
            self.state.close()
            self.state.traces.close()
            sock.close()

    async def _serve(self, server: uvicorn.Server, sock: socket.socket, addr: str) -> None:
        async def announce() -> None:
            while not server.started:
                if server.should_exit:
                    return
                await asyncio.sleep(0.02)  # uvicorn has no started event to wait on
            announce_ready(SERVICE_NAME, addr=addr, url=f"http://{addr}")

        async def watch_parent(parent_pid: int) -> None:
            while not server.should_exit:
                if os.getppid() != parent_pid:
                    log.warning("console: parent %d is gone, stopping", parent_pid)
                    server.should_exit = True
                await asyncio.sleep(PARENT_CHECK_S)

        tasks = [asyncio.create_task(announce())]
        parent = os.environ.get("FERRY_PARENT_PID", "")
        if parent.isdigit():
            tasks.append(asyncio.create_task(watch_parent(int(parent))))
        try:
            await server.serve(sockets=[sock])
        finally:
            for task in tasks:
                task.cancel()
