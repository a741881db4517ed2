"""What every page shares: templates, parameter parsing with limits, and turning errors into
4xx/5xx pages instead of letting them reach the server."""

from __future__ import annotations

import calendar
import contextvars
import logging
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import (
    BrokerNotExistError,
    ConnectionFailedError,
    FerryError,
    InvalidParameterError,
    NoPermissionError,
    QueryNotFoundError,
    RequestTimeoutError,
    ServiceNotAvailableError,
    SubscriptionGroupNotExistError,
    SystemBusyError,
    TopicNotExistError,
)

log = logging.getLogger("ferry.console.web")

TEMPLATES = Path(__file__).parent / "templates"
MAX_PARAM_CHARS = 512
MAX_FORM_BYTES = 64 * 1024
TIME_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M")

# who is logged in (login.LoginGate sets it per request; "" when nobody): the page header
current_user: contextvars.ContextVar[str] = contextvars.ContextVar("console_user", default="")

_STATUS = {
    InvalidParameterError: 400,
    TopicNotExistError: 404,
    QueryNotFoundError: 404,
    SubscriptionGroupNotExistError: 404,
    BrokerNotExistError: 404,
    NoPermissionError: 403,
    SystemBusyError: 503,
    ServiceNotAvailableError: 503,
    ConnectionFailedError: 503,
    RequestTimeoutError: 504,
}


class BadRequest(InvalidParameterError):
    """A page parameter that is missing, too long or malformed."""


def fmt_ms(ms: int | None) -> str:
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}"


def fmt_duration(ms: int) -> str:
    """A duration by its two largest units: "45s", "2m 5s", "3h 4m", "3d 4h"."""
    seconds = max(0, ms) // 1000
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    while len(parts) > 1 and parts[0][0] == 0:
        parts.pop(0)
    return " ".join(f"{n}{unit}" for n, unit in parts[:2])


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def fmt_bytes(n: int | float | None) -> str:
    """1536 -> "1.5 KiB"; None -> "-"."""
    if n is None:
        return "-"
    value, unit = float(n), 0
    while abs(value) >= 1024 and unit < len(_BYTE_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{value:.0f} B" if unit == 0 else f"{value:.1f} {_BYTE_UNITS[unit]}"


def fmt_input(ms: int) -> str:
    """A time as the time inputs take it (UTC)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000))


def make_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ms"] = fmt_ms
    env.filters["bytes"] = fmt_bytes
    env.filters["duration"] = fmt_duration
    env.filters["q"] = lambda s: urllib.parse.quote(str(s), safe="")
    return env


class Renderer:
    def __init__(self, env: jinja2.Environment, site: Mapping[str, Any]) -> None:
        self._env = env
        self._site = dict(site)

    def page(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("user", current_user.get())
        html = self._env.get_template(name).render(site=self._site, **context)
        return HTMLResponse(html, status_code=status_code)

    def error(self, status_code: int, title: str, detail: str) -> HTMLResponse:
        return self.page(
            "error.html", status_code=status_code, title=title, detail=detail, code=status_code
        )


# ---- parameters ----


def param(
    request: Request, name: str, default: str = "", *, max_chars: int = MAX_PARAM_CHARS
) -> str:
    value = request.query_params.get(name, default).strip()
    if len(value) > max_chars:
        raise BadRequest(f"{name} is longer than {max_chars} characters")
    return value


def int_value(name: str, raw: str, low: int, high: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, not {raw[:40]!r}") from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be within {low}..{high}")
    return value


def parse_time(name: str, raw: str) -> int:
    """Epoch milliseconds from 'YYYY-MM-DD HH:MM[:SS]' (UTC) or a number of ms."""
    raw = raw.strip()
    if raw.isdigit():
        return int_value(name, raw, 0, 2**53)
    for fmt in TIME_FORMATS:
        try:
            return calendar.timegm(time.strptime(raw, fmt)) * 1000
        except ValueError:
            continue
    raise BadRequest(f"{name} {raw[:40]!r} is not a time (YYYY-MM-DD HH:MM:SS, UTC, or epoch ms)")


async def form(request: Request) -> dict[str, str]:
    """A urlencoded form body (small: MAX_FORM_BYTES), one value per field."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise BadRequest(f"form larger than {MAX_FORM_BYTES} bytes")
    try:
        pairs = urllib.parse.parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=64)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"bad form: {exc}") from None
    out = {k: v.strip() for k, v in pairs}
    for key, value in out.items():
        if len(value) > MAX_PARAM_CHARS:
            raise BadRequest(f"{key} is longer than {MAX_PARAM_CHARS} characters")
    return out


def same_origin(request: Request) -> bool:
    """Whether a browser POST comes from the console's own pages (a page elsewhere must not
    be able to change topics or offsets through an operator's browser)."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    host = request.headers.get("host", "")
    return urllib.parse.urlsplit(origin).netloc == host


# ---- errors ----


def status_of(err: FerryError) -> int:
    for cls in type(err).__mro__:
        if cls in _STATUS:
            return _STATUS[cls]
    return 502  # the cluster answered with an error the console cannot fix


def error_response(renderer: Renderer, request: Request, exc: Exception) -> Response:
    if isinstance(exc, FerryError):
        status = status_of(exc)
        try:
            title = ResponseCode(exc.code).name
        except ValueError:
            title = "error"
        detail = exc.message
    elif isinstance(exc, HTTPException):
        status, title, detail = exc.status_code, "HTTP error", str(exc.detail)
    else:
        log.exception("%s %s failed", request.method, request.url.path)
        status, title, detail = 500, "internal error", f"{type(exc).__name__} (logged)"
    if request.url.path.startswith(("/v1/", "/api/")):
        return PlainTextResponse(f"{title}: {detail}", status_code=status)
    return renderer.error(status, title, detail)
