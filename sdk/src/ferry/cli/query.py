"""mqadmin's message queries: queryMsgById, queryMsgByKey, queryMsgByUniqueKey and printMsg.

Registered on `ferry admin`'s app when imported (as admin_messages does); queryMsgByOffset
lives in admin_messages. By key and unique key, each broker of the topic answers from its
index; an offset message id is read without any index.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ferry.cli.admin import DEFAULT_NAMESRV, Json, Namesrv, Topic, admin_session, app
from ferry.cli.output import not_found, print_json, print_table, progress, show_time
from ferry.cli.tables import Free

if TYPE_CHECKING:
    from ferry.client import MessageExt

BODY_PREVIEW = 80
ROCKETMQ_TIME = "%Y-%m-%d#%H:%M:%S:%f"  # mqadmin's yyyy-MM-dd#HH:mm:ss:SSS

End = Annotated[str | None, typer.Option("-e", "--endTimestamp", help="as --beginTimestamp")]
# queryMsgByKey: mqadmin's -b (begin) too; -f is Ferry's older spelling, kept
KeyBegin = Annotated[
    str | None,
    typer.Option(
        "-b",
        "-f",
        "--beginTimestamp",
        help="ms since the epoch, ISO 8601 or yyyy-MM-dd#HH:mm:ss:SSS",
    ),
]


def parse_time(text: str | None, default: int) -> int:
    """A time given on the command line, in ms since the epoch (local time when no zone)."""
    if text is None or not text.strip():
        return default
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    for parse in (
        lambda t: dt.datetime.strptime(t, ROCKETMQ_TIME),
        dt.datetime.fromisoformat,
    ):
        try:
            when = parse(text)
        except ValueError:
            continue
        return int(when.timestamp() * 1000)
    raise typer.BadParameter(f"{text!r} is not a time (ms, ISO 8601 or yyyy-MM-dd#HH:mm:ss:SSS)")


def body_text(body: bytes, limit: int | None = None) -> str:
    text = body.decode(errors="replace")
    return text if limit is None or len(text) <= limit else text[:limit] + "…"


def message_dict(msg: MessageExt) -> dict[str, Any]:
    """A message for --json: every field, the body as text when it is UTF-8."""
    out: dict[str, Any] = {
        "topic": msg.topic,
        "msg_id": msg.msg_id,
        "offset_msg_id": msg.offset_msg_id,
        "broker_name": msg.broker_name,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "commitlog_offset": msg.commitlog_offset,
        "tags": msg.tags,
        "keys": list(msg.keys),
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "born_host": msg.born_host,
        "store_host": msg.store_host,
        "reconsume_times": msg.reconsume_times,
        "sysflag": msg.sysflag,
        "properties": dict(msg.properties),
    }
    try:
        out["body"] = msg.body.decode()
    except UnicodeDecodeError:
        out["body_base64"] = base64.b64encode(msg.body).decode()
    return out


def print_messages(title: str, msgs: Sequence[MessageExt], json: bool) -> None:
    if json:
        print_json([message_dict(m) for m in msgs])
        return
    rows = [
        (
            m.msg_id,
            m.offset_msg_id,
            m.broker_name,
            m.queue_id,
            m.queue_offset,
            show_time(m.store_timestamp),
            m.tags,
            " ".join(m.keys),
            Free(body_text(m.body, BODY_PREVIEW)),
        )
        for m in msgs
    ]
    print_table(
        title,
        [
            "msg id",
            "offset msg id",
            "broker",
            "queue",
            "offset",
            "stored (UTC)",
            "tags",
            "keys",
            "body",
        ],
        rows,
    )


def print_message(msg: MessageExt, json: bool) -> None:
    if json:
        print_json(message_dict(msg))
        return
    rows = [
        ("Topic", msg.topic),
        ("Tags", msg.tags or ""),
        ("Keys", " ".join(msg.keys)),
        ("Msg ID", msg.msg_id),
        ("Offset Msg ID", msg.offset_msg_id),
        ("Broker", msg.broker_name),
        ("Queue ID", msg.queue_id),
        ("Queue Offset", msg.queue_offset),
        ("CommitLog Offset", msg.commitlog_offset),
        ("Reconsume Times", msg.reconsume_times),
        ("Born Timestamp", f"{show_time(msg.born_timestamp)} UTC"),
        ("Store Timestamp", f"{show_time(msg.store_timestamp)} UTC"),
        ("Born Host", msg.born_host),
        ("Store Host", msg.store_host),
        ("System Flag", msg.sysflag),
        ("Properties", Free(", ".join(f"{k}={v}" for k, v in sorted(msg.properties.items())))),
        ("Body", Free(body_text(msg.body))),
    ]
    print_table(f"message {msg.msg_id}", ["field", "value"], rows, fields=True)


@app.command("queryMsgById")
def query_msg_by_id(
    msg_id: Annotated[
        str,
        typer.Option("-i", "--msgId", metavar="ID", help="offset msg id, or the producer's msg id"),
    ],
    topic: Annotated[
        str | None,
        typer.Option(
            "-t", "--topic", metavar="TOPIC", help="look a producer's msg id up in this topic only"
        ),
    ] = None,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Show a message by its offset msg id (broker + CommitLog offset, read without any
    index) or else by the msg id its producer gave it (looked up in every topic's index, or
    -t's)."""
    from ferry.admin import queries as q

    with admin_session(namesrv) as admin:
        msgs = q.query_msg_by_id(admin, msg_id, topic)
    if len(msgs) == 1:
        print_message(msgs[0], json)
    else:
        print_messages(f"{len(msgs)} copies of {msg_id}", msgs, json)


@app.command("queryMsgByKey")
def query_msg_by_key(
    topic: Topic,
    key: Annotated[str, typer.Option("-k", "--msgKey", help="a key from the message's KEYS")],
    begin: KeyBegin = None,
    end: End = None,
    max_num: Annotated[
        int, typer.Option("-m", "-c", "--maxNum", help="at most this many (-c: older)")
    ] = 32,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Messages of a topic carrying a key, newest first (from each broker's index)."""
    from ferry.admin import queries as q
    from ferry.protocol.messages import MAX_QUERY_MS

    with admin_session(namesrv) as admin:
        msgs = q.query_msg_by_key(
            admin,
            topic,
            key,
            max_num=max_num,
            begin_ms=parse_time(begin, 0),
            end_ms=parse_time(end, MAX_QUERY_MS),
        )
    print_messages(f"{len(msgs)} messages of {topic} with key {key}", msgs, json)


@app.command("queryMsgByUniqueKey")
def query_msg_by_unique_key(
    msg_id: Annotated[str, typer.Option("-i", "--msgId", help="the client msg id (UNIQ_KEY)")],
    topic: Topic,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    show_all: Annotated[
        bool, typer.Option("-a", "--showAll", help="accepted for mqadmin: every copy is shown")
    ] = False,
    json: Json = False,
) -> None:
    """Show a message by the msg id its producer gave it (every stored copy)."""
    del show_all
    from ferry.admin import queries as q

    with admin_session(namesrv) as admin:
        msgs = q.query_msg_by_unique_key(admin, topic, msg_id)
    if not msgs:
        not_found(f"no message of {topic} has msg id {msg_id}")
    if len(msgs) == 1:
        print_message(msgs[0], json)
    else:
        print_messages(f"{len(msgs)} copies of {msg_id}", msgs, json)


@app.command("printMsg")
def print_msg(
    topic: Topic,
    begin: Annotated[
        str | None,
        typer.Option("-b", "--beginTimestamp", help="ms, ISO 8601 or yyyy-MM-dd#HH:mm:ss:SSS"),
    ] = None,
    end: End = None,
    print_body: Annotated[bool, typer.Option("-d", "--printBody", help="whole bodies")] = False,
    expression: Annotated[
        str, typer.Option("-s", "--subExpression", help="tags: * or TagA || TagB")
    ] = "*",
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Every message of a topic stored in a time range (with one of the tags of -s), queue
    by queue."""
    from ferry.admin import queries as q
    from ferry.client.consume_state import parse_tags
    from ferry.protocol.messages import MAX_QUERY_MS

    tags = parse_tags(expression)
    msgs: list[MessageExt] = []
    with admin_session(namesrv) as admin, progress() as bar:
        task = bar.add_task(f"reading {topic}", total=None)
        for msg in q.print_msg(admin, topic, parse_time(begin, 0), parse_time(end, MAX_QUERY_MS)):
            bar.advance(task)
            if tags is None or msg.tags in tags:
                msgs.append(msg)
    if json or not print_body:
        print_messages(f"{len(msgs)} messages of {topic}", msgs, json)
        return
    for msg in msgs:
        print_message(msg, False)
