"""mqadmin's message commands: sendMessage, consumeMessage, checkMsgSendRT, printMsgByQueue,
queryMsgByOffset."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Annotated

import typer

from ferry.cli.admin import (
    DEFAULT_NAMESRV,
    Json,
    Namesrv,
    Topic,
    admin_session,
    app,
)
from ferry.cli.credentials import client_options
from ferry.cli.output import die, not_found, print_json, print_table, progress, show_time
from ferry.cli.tables import Free
from ferry.protocol.errors import FerryError

if TYPE_CHECKING:
    from ferry.client import MessageExt, MessageQueue, PullConsumer

TOOLS_GROUP = "TOOLS_CONSUMER"  # RocketMQ's name for mqadmin's own reads; it never commits
PREVIEW = 64


def _preview(body: bytes) -> str:
    text = body[:PREVIEW].decode("utf-8", errors="replace")
    return text + ("…" if len(body) > PREVIEW else "")


def _message_rows(msgs: list[MessageExt]) -> list[tuple[object, ...]]:
    return [
        (
            m.queue.broker_name,
            m.queue.queue_id,
            m.queue_offset,
            m.msg_id,
            m.tags or "",
            " ".join(m.keys),
            len(m.body),
            Free(_preview(m.body)),
        )
        for m in msgs
    ]


MESSAGE_COLUMNS = ["broker", "queue", "offset", "msg id", "tags", "keys", "size", "body"]


def _message_json(m: MessageExt) -> dict[str, object]:
    return {
        "topic": m.topic,
        "broker": m.queue.broker_name,
        "queue_id": m.queue.queue_id,
        "queue_offset": m.queue_offset,
        "msg_id": m.msg_id,
        "offset_msg_id": m.offset_msg_id,
        "tags": m.tags,
        "keys": m.keys,
        "properties": m.properties,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "body": m.body.decode("utf-8", errors="replace"),
    }


@app.command("sendMessage")
def send_message(
    topic: Topic,
    body: Annotated[str, typer.Option("-p", "--body", help="message body (utf-8)")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    tags: Annotated[str | None, typer.Option("-c", "--tags")] = None,
    keys: Annotated[
        str | None, typer.Option("-k", "--keys", "--key", help="space-separated")
    ] = None,
    broker: Annotated[
        str | None, typer.Option("-b", "--broker", help="to this broker's queue -i")
    ] = None,
    queue_id: Annotated[int | None, typer.Option("-i", "--qid", help="queue id (with -b)")] = None,
    count: Annotated[
        int, typer.Option("--count", help="send it this many times (a progress bar on a TTY)")
    ] = 1,
    json: Json = False,
) -> None:
    """Send a message (--count times) and print where the last one was stored; to one
    queue with -b and -i."""
    if count < 1:
        raise typer.BadParameter("--count must be at least 1")
    if (broker is None) != (queue_id is None):
        raise typer.BadParameter("-b (broker name) and -i (queue id) go together")
    from ferry.client import Message, MessageQueue, Producer

    msg = Message(topic, body.encode(), tags=tags, keys=keys.split() if keys else None)
    queue = MessageQueue(topic, broker, queue_id) if broker and queue_id is not None else None
    try:
        with (
            Producer("TOOLS_PRODUCER", namesrv, **client_options()) as producer,
            progress() as bar,
        ):
            task = bar.add_task(f"sending to {topic}", total=count)
            for _ in range(count):
                result = producer.send(msg, queue)
                bar.advance(task)
    except FerryError as err:
        die(err)
    row = {
        "sent": count,
        "status": result.status.name,
        "msg_id": result.msg_id,
        "offset_msg_id": result.offset_msg_id,
        "broker": result.queue.broker_name,
        "queue_id": result.queue.queue_id,
        "queue_offset": result.queue_offset,
    }
    if json:
        print_json(row)
        return
    print_table(f"sent to {topic}", list(row), [list(row.values())])


def _read(consumer: PullConsumer, want: int, idle_s: float) -> list[MessageExt]:
    got: list[MessageExt] = []
    while len(got) < want:
        batch = consumer.poll(timeout=idle_s)
        if not batch:
            break
        got.extend(batch)
    return got[:want]


def _read_from(
    namesrv: str,
    starts: dict[MessageQueue, int],
    count: int,
    idle_s: float,
    group: str = TOOLS_GROUP,
) -> list[MessageExt]:
    """Up to `count` messages of the given queues from the given offsets; commits nothing."""
    from ferry.client import PullConsumer

    with PullConsumer(group, namesrv, auto_commit=False, **client_options()) as consumer:
        consumer.assign(starts)
        for queue, offset in starts.items():
            consumer.seek(queue, offset)
        return _read(consumer, count, idle_s)


def _show(title: str, msgs: list[MessageExt], json: bool) -> None:
    if json:
        print_json([_message_json(m) for m in msgs])
    else:
        print_table(title, MESSAGE_COLUMNS, _message_rows(msgs))


@app.command("consumeMessage")
def consume_message(
    topic: Topic,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    count: Annotated[
        int, typer.Option("-c", "--count", "--MessageNumber", help="at most this many")
    ] = 32,
    broker: Annotated[
        str | None, typer.Option("-b", "--brokerName", help="this broker's queues only")
    ] = None,
    queue_id: Annotated[int | None, typer.Option("-i", "--queueId", help="this queue only")] = None,
    offset: Annotated[int, typer.Option("-o", "--offset", help="from this queue offset")] = 0,
    group: Annotated[
        str, typer.Option("-g", "--consumerGroup", help="pull as this group (never commits)")
    ] = TOOLS_GROUP,
    begin: Annotated[
        str | None,
        typer.Option("-s", "--beginTimestamp", help="from the first message stored then"),
    ] = None,
    end: Annotated[
        str | None, typer.Option("-e", "--endTimestamp", help="up to messages stored then")
    ] = None,
    wait: Annotated[float, typer.Option("--wait", help="seconds to wait for more")] = 2.0,
    json: Json = False,
) -> None:
    """Read messages of a topic (of one broker -b, one queue -i) from the beginning, from
    -o, or from the time -s (up to -e), without committing any offset."""
    from ferry.cli.query import parse_time
    from ferry.protocol.messages import MAX_QUERY_MS

    until = parse_time(end, MAX_QUERY_MS)
    try:
        with admin_session(namesrv) as admin:
            queues = [
                q
                for q in admin.queues(topic)
                if (broker is None or q.broker_name == broker)
                and (queue_id is None or q.queue_id == queue_id)
            ]
            if not queues:
                which = f"{broker or '*'}#{'*' if queue_id is None else queue_id}"
                not_found(f"{topic} has no queue {which}")
            starts = dict.fromkeys(queues, offset)
            if begin is not None:
                since = parse_time(begin, 0)
                starts = {q: admin.search_offset(q, since) for q in queues}
        msgs = _read_from(namesrv, starts, count, wait, group)
    except FerryError as err:
        die(err)
    msgs = [m for m in msgs if m.store_timestamp <= until]
    _show(f"{len(msgs)} messages of {topic}", msgs, json)


@app.command("printMsgByQueue")
def print_msg_by_queue(
    topic: Topic,
    broker: Annotated[
        str, typer.Option("-a", "-b", "--brokerName", "--broker-name", help="broker name")
    ],
    queue_id: Annotated[int, typer.Option("-i", "--queueId", "--queue-id")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    begin: Annotated[int, typer.Option("-o", "--offset", help="first queue offset")] = 0,
    count: Annotated[int, typer.Option("-c", "--count")] = 32,
    expression: Annotated[
        str, typer.Option("-s", "--subExpression", help="tags: * or TagA || TagB")
    ] = "*",
    end: Annotated[
        str | None, typer.Option("-e", "--endTimestamp", help="up to messages stored then")
    ] = None,
    print_body: Annotated[bool, typer.Option("-d", "--printBody", help="whole bodies")] = False,
    json: Json = False,
) -> None:
    """Print one queue's messages from an offset (with one of the tags of -s, stored up to
    -e)."""
    from ferry.cli.query import parse_time, print_message
    from ferry.client import MessageQueue
    from ferry.client.consume_state import parse_tags
    from ferry.protocol.messages import MAX_QUERY_MS

    queue = MessageQueue(topic, broker, queue_id)
    try:
        msgs = _read_from(namesrv, {queue: begin}, count, 1.0)
    except FerryError as err:
        die(err)
    tags = parse_tags(expression)
    until = parse_time(end, MAX_QUERY_MS)
    msgs = [m for m in msgs if (tags is None or m.tags in tags) and m.store_timestamp <= until]
    if print_body and not json:
        for msg in msgs:
            print_message(msg, False)
        return
    _show(f"{queue} from offset {begin}", msgs, json)


@app.command("queryMsgByOffset")
def query_msg_by_offset(
    topic: Topic,
    broker: Annotated[str, typer.Option("-b", "--brokerName", "--broker-name")],
    queue_id: Annotated[int, typer.Option("-i", "--queueId", "--queue-id")],
    offset: Annotated[int, typer.Option("-o", "--offset")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Show the message at one queue offset."""
    from ferry.client import MessageQueue

    queue = MessageQueue(topic, broker, queue_id)
    with admin_session(namesrv) as admin:
        info = _message_json(admin.query_msg_by_offset(queue, offset))
    if json:
        print_json(info)
        return
    shown = {
        k: f"{show_time(v)} UTC" if k.endswith("_timestamp") and isinstance(v, int) else v
        for k, v in info.items()
    }
    shown["body"] = Free(str(shown["body"]))
    shown["properties"] = Free(str(shown["properties"]))
    print_table(
        f"message at {queue} offset {offset}", ["field", "value"], list(shown.items()), fields=True
    )


@app.command("checkMsgSendRT")
def check_msg_send_rt(
    topic: Topic,
    namesrv: Namesrv = DEFAULT_NAMESRV,
    amount: Annotated[int, typer.Option("-a", "--amount")] = 100,
    size: Annotated[int, typer.Option("-s", "--size", help="body bytes")] = 128,
    json: Json = False,
) -> None:
    """Send messages one by one and report the send round-trip times."""
    from ferry.client import Message, Producer

    times_ms: list[float] = []
    try:
        with (
            Producer("TOOLS_PRODUCER", namesrv, **client_options()) as producer,
            progress() as bar,
        ):
            task = bar.add_task("sending", total=amount)
            body = b"x" * size
            for _ in range(amount):
                started = time.perf_counter()
                producer.send(Message(topic, body))
                times_ms.append((time.perf_counter() - started) * 1000)
                bar.advance(task)
    except FerryError as err:
        die(err)
    ordered = sorted(times_ms)
    stats = {
        "count": len(ordered),
        "avg_ms": round(statistics.fmean(ordered), 3),
        "p50_ms": round(ordered[len(ordered) // 2], 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
        "max_ms": round(ordered[-1], 3),
    }
    if json:
        print_json(stats)
        return
    print_table(f"send RT to {topic}, {size} B bodies", list(stats), [list(stats.values())])
