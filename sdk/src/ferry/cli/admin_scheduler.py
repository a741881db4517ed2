"""`ferry admin schedulerStatus`: a broker's scheduler (delay levels, timers, and what its
other parts report). Registered on `ferry admin`'s app when imported, as admin_messages."""

from __future__ import annotations

from typing import Annotated

import typer

from ferry.cli.admin import DEFAULT_NAMESRV, Json, Namesrv, admin_session, app
from ferry.cli.output import print_json, print_table, show_time


@app.command("schedulerStatus")
def scheduler_status(
    broker_addr: Annotated[str, typer.Option("-b", "--broker-addr")],
    namesrv: Namesrv = DEFAULT_NAMESRV,
    json: Json = False,
) -> None:
    """Delayed messages pending per level, timers pending, deliveries (the broker's scheduler)."""
    with admin_session(namesrv) as admin:
        status = admin.scheduler_status(broker_addr)
    if json:
        import msgspec

        print_json(msgspec.to_builtins(status))
        return
    print_table(
        f"delay levels of {broker_addr}",
        ["level", "delay ms", "delivered offset", "max offset", "pending", "delivered"],
        [
            (
                lv.level,
                lv.delay_ms,
                lv.offset,
                lv.max_offset,
                lv.max_offset - lv.offset,
                lv.delivered,
            )
            for lv in status.levels
        ],
    )
    rows = [
        ("timer pending", status.timer_pending),
        ("timer delivered", status.timer_delivered),
        ("timer queue offset", f"{status.timer_queue_offset} of {status.timer_queue_max}"),
        ("timers read up to (UTC)", show_time(status.timer_read_ms)),
        ("repeats skipped after restart", status.skipped_duplicates),
        *sorted(status.extra.items()),
    ]
    print_table("timers", ["key", "value"], rows, fields=True)
