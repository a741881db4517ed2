"""The console's login, when the cluster authenticates (issue 27).

Whether pages ask for one (authRequired): `true`, `false`, or `auto`, the default: yes when
the console was given credentials (only a cluster with authentication needs them), or when
the cluster refuses an unsigned getClusterInfo with NoCredentials (asked again every
PROBE_TTL_S until it does; once it has, the console keeps asking for logins until restarted).
auto cannot open a hole: without a login, pages send unsigned requests, never the console's
own credentials, so a cluster with authentication refuses them whatever the console decided.

A login is an access key and secret key (a user made with createUser), checked by one request
signed with them (getClusterInfo). A key the cluster does not authenticate is refused; one it
authenticates but does not allow Cluster Get is let in (its pages show what its ACLs allow).
The session is a random token in an HttpOnly, SameSite=Strict cookie; sessions live in this
process's memory (a restart logs everyone out), each with its own clients signing with its
user's credentials, closed at logout, expiry, or when MaxSessions pushes the oldest out.
The secret key is kept in the session's Credentials only: never rendered back, never logged.
"""

from __future__ import annotations

import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ferry.console.state import Clients, ConsoleState
from ferry.console.web import Renderer, current_user, form, same_origin
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import (
    BadSignatureError,
    FerryError,
    NoCredentialsError,
    NoPermissionError,
)

COOKIE = "ferry_console_session"
SCOPE_KEY = "ferry.console.session"
PROBE_TTL_S = 10.0
# paths served without a login: the health probe, the login itself, the stylesheet, and the
# OTLP receiver the services post their spans to
OPEN_PATHS = frozenset({"/healthz", "/login", "/logout", "/v1/traces"})
OPEN_PREFIXES = ("/static/",)


@dataclass
class Session:
    token: str
    access_key: str
    clients: Clients
    created: float
    last_used: float


@dataclass
class Sessions:
    """Logged-in sessions by token, in memory, with an idle and an absolute expiry."""

    idle_s: float
    max_age_s: float
    max_sessions: int
    _by_token: dict[str, Session] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, access_key: str, clients: Clients) -> tuple[Session, list[Session]]:
        """A new session, and the sessions it pushed out (to be closed by the caller)."""
        now = time.monotonic()
        session = Session(secrets.token_urlsafe(32), access_key, clients, now, now)
        with self._lock:
            gone = self._expired(now)
            while len(self._by_token) >= self.max_sessions:
                oldest = min(self._by_token.values(), key=lambda s: s.last_used)
                gone.append(self._by_token.pop(oldest.token))
            self._by_token[session.token] = session
        return session, gone

    def get(self, token: str) -> tuple[Session | None, list[Session]]:
        """The live session of token (its idle clock restarted), and the expired ones."""
        now = time.monotonic()
        with self._lock:
            gone = self._expired(now)
            session = self._by_token.get(token) if token else None
            if session is not None:
                session.last_used = now
        return session, gone

    def pop(self, token: str) -> Session | None:
        with self._lock:
            return self._by_token.pop(token, None)

    def drain(self) -> list[Session]:
        with self._lock:
            out, self._by_token = list(self._by_token.values()), {}
        return out

    def _expired(self, now: float) -> list[Session]:
        dead = [
            t
            for t, s in self._by_token.items()
            if now - s.last_used > self.idle_s or now - s.created > self.max_age_s
        ]
        return [self._by_token.pop(t) for t in dead]


def close_all(sessions: list[Session]) -> None:
    for session in sessions:
        session.clients.close()


class Login:
    """Whether pages need a login, the session store, and the login and logout pages."""

    def __init__(self, state: ConsoleState) -> None:
        config = state.config
        self.state = state
        self.mode = config.auth_required
        self.has_credentials = config.credentials() is not None
        self.sessions = Sessions(
            config.session_timeout_minutes * 60.0,
            config.session_max_hours * 3600.0,
            config.max_sessions,
        )
        self._seen_auth = False
        self._probed_at = float("-inf")
        self._probe_lock = threading.Lock()

    # ---- is a login needed ----

    def required(self) -> bool:
        """Blocking (may ask the cluster): call it from a thread."""
        if self.mode != "auto":
            return self.mode == "true"
        if self.has_credentials or self._seen_auth:
            return True
        with self._probe_lock:
            if time.monotonic() - self._probed_at >= PROBE_TTL_S:
                self._probed_at = time.monotonic()
                self._seen_auth = self._refuses_unsigned()
        return self._seen_auth

    def _refuses_unsigned(self) -> bool:
        # the console has no credentials here, so its own Admin sends unsigned requests
        try:
            self.state.clients.admin.cluster_info()
        except NoCredentialsError:
            return True
        except FerryError:  # down, or a refusal of another kind: not known to authenticate
            return False
        return False

    # ---- sessions ----

    async def session_of(self, request: Request) -> Session | None:
        session, gone = self.sessions.get(request.cookies.get(COOKIE, ""))
        if gone:
            await run_in_threadpool(close_all, gone)
        return session

    def close(self) -> None:
        close_all(self.sessions.drain())

    # ---- pages ----

    def form_page(
        self, request: Request, *, error: str = "", access_key: str = "", status: int = 200
    ) -> Response:
        return self.state.renderer.page(
            "login.html",
            status_code=status,
            error=error,
            access_key=access_key,
            next=safe_next(request.query_params.get("next", "") or here(request)),
        )

    async def login_page(self, request: Request) -> Response:
        if await self.session_of(request) is not None:
            return RedirectResponse(safe_next(request.query_params.get("next", "")), 303)
        return self.form_page(request)

    async def login(self, request: Request) -> Response:
        if not same_origin(request):
            return PlainTextResponse("a login must come from the console's own page", 403)
        values = await form(request)
        access, secret = values.get("access_key", ""), values.get("secret_key", "")
        target = safe_next(values.get("next", ""))
        if not access or not secret:
            return self.form_page(
                request, error="give an access key and a secret key", access_key=access, status=400
            )
        user = Credentials(access, secret)
        clients = Clients(self.state.config, user, self.state.clients.tls_server_key)
        error, status = await run_in_threadpool(check_login, clients)
        if error:
            await run_in_threadpool(clients.close)
            return self.form_page(request, error=error, access_key=access, status=status)
        session, gone = self.sessions.add(access, clients)
        if gone:
            await run_in_threadpool(close_all, gone)
        response = RedirectResponse(target, 303)
        response.set_cookie(
            COOKIE,
            session.token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    async def logout(self, request: Request) -> Response:
        if not same_origin(request):
            return PlainTextResponse("a logout must come from the console's own page", 403)
        session = self.sessions.pop(request.cookies.get(COOKIE, ""))
        if session is not None:
            await run_in_threadpool(session.clients.close)
        response = RedirectResponse("/login", 303)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response


def check_login(clients: Clients) -> tuple[str, int]:
    """("", 200) when the cluster authenticates the clients' credentials, else why not."""
    try:
        clients.start()
        clients.admin.cluster_info()
    except (BadSignatureError, NoCredentialsError):
        return "the cluster refused this access key and secret key", 401
    except NoPermissionError:
        return "", 200  # authenticated; its ACLs decide what its pages show
    except FerryError as err:
        return f"cannot check the login now: {err.message}", 503
    return "", 200


def here(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def safe_next(path: str) -> str:
    """Where to go after the login: a path of this console only (never another site)."""
    parts = urllib.parse.urlsplit(path)
    if parts.scheme or parts.netloc or not path.startswith("/") or path.startswith("//"):
        return "/"
    if parts.path in ("/login", "/logout"):
        return "/"
    return path if len(path) <= 512 else "/"


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


class LoginGate:
    """Every page but the open ones: the session's clients, or the login form."""

    def __init__(self, app: ASGIApp, login: Login, renderer: Renderer) -> None:
        self.app = app
        self.login = login
        self.renderer = renderer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        session = await self.login.session_of(request)
        if session is not None:
            scope[SCOPE_KEY] = session
            token = current_user.set(session.access_key)
            try:
                await self.app(scope, receive, send)
            finally:
                current_user.reset(token)
            return
        if is_open(request.url.path) or not await run_in_threadpool(self.login.required):
            await self.app(scope, receive, send)
            return
        response: Response
        if request.url.path.startswith("/api/") or request.method != "GET":
            response = PlainTextResponse("log in first (/login)", 401)
        else:
            response = self.login.form_page(request, status=401)
        await response(scope, receive, send)


def scoped(request: Request, state: ConsoleState) -> ConsoleState:
    """The state as the request's session sees it (the console's own without a session)."""
    session: Session | None = request.scope.get(SCOPE_KEY)
    return state if session is None else state.scoped(session.clients, session.access_key)
