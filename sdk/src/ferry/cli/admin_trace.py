"""mqadmin queryMsgTraceById (a message's trace, from the console) and DecodeMessageId.

Ferry does not write RocketMQ's trace topic (RMQ_SYS_TRACE_TOPIC): its services and clients
export OpenTelemetry spans, and the console keeps them and finds them by message id. So this
command asks the console's /api/trace/message/<msgId>.

Registered on `ferry admin`'s app when imported (main.py imports it).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ferry.cli.admin import Json, app
from ferry.cli.output import EXIT_FAILED, fail, not_found, print_json, print_table, show_time

DEFAULT_CONSOLE = "http://127.0.0.1:8080"
CONSOLE_ENV = "FERRY_CONSOLE"
TIMEOUT_S = 30.0


def fetch_message_trace(console: str, msg_id: str) -> dict[str, Any]:
    """The console's answer: {msg_id, traces, spans, note}."""
    import json
    import urllib.error
    import urllib.parse
    import urllib.request

    if urllib.parse.urlsplit(console).scheme not in ("http", "https"):
        raise typer.BadParameter(f"--console {console!r} is not an http:// or https:// URL")
    url = f"{console.rstrip('/')}/api/trace/message/{urllib.parse.quote(msg_id, safe='')}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:  # noqa: S310 (http(s) only)
            final = urllib.parse.urlsplit(reply.geturl()).path
            body = reply.read()
    except urllib.error.HTTPError as err:
        fail(f"the console at {console} answered {err.code} {err.reason}")
        raise typer.Exit(EXIT_FAILED) from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        not_found(f"no console answers at {console} ({reason}); give --console or {CONSOLE_ENV}")
    if final.rstrip("/").endswith("/login"):
        fail(f"the console at {console} asks for a login: traces are read in its pages")
        raise typer.Exit(EXIT_FAILED)
    try:
        found = json.loads(body)
    except ValueError:
        found = None
    if not isinstance(found, dict) or not isinstance(found.get("spans"), list):
        # something else listens there (8080 is a common port): say so, not "no trace"
        fail(
            f"{console} is not a Ferry console (its answer holds no spans); "
            f"give --console or {CONSOLE_ENV}"
        )
        raise typer.Exit(EXIT_FAILED)
    return found


@app.command("queryMsgTraceById")
def query_msg_trace_by_id(
    msg_id: Annotated[str, typer.Option("-i", "--msgId", help="the message id (UNIQ_KEY)")],
    console: Annotated[
        str,
        typer.Option("--console", envvar=CONSOLE_ENV, metavar="URL", help="the Ferry console"),
    ] = DEFAULT_CONSOLE,
    trace_topic: Annotated[
        str | None,
        typer.Option("-t", "--traceTopic", help="accepted for mqadmin: traces are the console's"),
    ] = None,
    namesrv: Annotated[
        str | None,
        typer.Option("-n", "--namesrv", envvar="NAMESRV_ADDR", help="accepted for mqadmin"),
    ] = None,
    json: Json = False,
) -> None:
    """The spans of a message's path (send, store, deliveries, consumption) that the console
    holds, found by its message id, in time order."""
    del trace_topic, namesrv
    if not msg_id.strip():
        raise typer.BadParameter("-i is empty")
    found = fetch_message_trace(console, msg_id.strip())
    spans = sorted(found.get("spans", []), key=lambda s: (s["start_ns"], s["service"]))
    if json:
        print_json(found)
        return
    if not spans:
        not_found(
            f"the console at {console} holds no trace of message {msg_id}. {found.get('note', '')}"
        )
    print_table(
        f"trace of message {msg_id} (console {console})",
        ["trace id", "service", "span", "start (UTC)", "ms", "status"],
        [
            (
                s["trace_id"],
                s["service"],
                s["name"],
                show_time(s["start_ns"] // 1_000_000),
                round((s["end_ns"] - s["start_ns"]) / 1e6, 3),
                "error" if s["status_code"] == 2 else "ok",
            )
            for s in spans
        ],
    )


@app.command("DecodeMessageId")
def decode_message_id(
    msg_ids: Annotated[
        str, typer.Option("-i", "--messageId", help="message ids (UNIQ_KEY), comma separated")
    ],
    json: Json = False,
) -> None:
    """The client address, process id and send time held in message ids (the time to the
    millisecond, in the current month or the one before)."""
    from ferry.client.msg_id import decode_msg_id

    rows = []
    for msg_id in (i.strip() for i in msg_ids.split(",")):
        if not msg_id:
            continue
        try:
            ip, pid, sent = decode_msg_id(msg_id)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        rows.append((msg_id, ip, pid, sent))
    if not rows:
        raise typer.BadParameter("-i holds no message id")
    if json:
        keys = ("msg_id", "client_ip", "pid", "sent_ms")
        print_json([dict(zip(keys, r, strict=True)) for r in rows])
        return
    print_table(
        "message ids",
        ["msg id", "client ip", "pid", "sent (UTC)"],
        [(m, ip, pid, show_time(sent)) for m, ip, pid, sent in rows],
    )
