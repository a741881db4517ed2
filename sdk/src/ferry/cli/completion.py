"""Shell completion of topic, group, broker and cluster names, asked of the cluster while the
user types.

Each callback asks the name server given so far (-n, else NAMESRV_ADDR, else the default)
with a short timeout and offers nothing on failure: completion never prints an error or hangs
a shell. Install with `ferry --install-completion` (or `mqadmin --install-completion`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import typer

from ferry.cli.credentials import client_options
from ferry.protocol.errors import FerryError

if TYPE_CHECKING:
    from ferry.admin import Admin

DEFAULT_NAMESRV = "127.0.0.1:9876"
TIMEOUT_MS = 800


def _ask(ctx: typer.Context, incomplete: str, names: Callable[[Admin], Iterable[str]]) -> list[str]:
    given = ctx.params.get("namesrv") if ctx is not None else None
    namesrv = str(given or os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV)
    import zmq

    from ferry.admin import Admin

    ferry_log = logging.getLogger("ferry")
    level = ferry_log.level
    ferry_log.setLevel(logging.CRITICAL)  # nothing may reach the shell; put back after
    try:
        with Admin(namesrv, timeout_ms=TIMEOUT_MS, **client_options()) as admin:
            return sorted(n for n in set(names(admin)) if n.startswith(incomplete))
    except (FerryError, OSError, zmq.ZMQError):
        return []
    finally:
        ferry_log.setLevel(level)


def complete_topic(ctx: typer.Context, incomplete: str) -> list[str]:
    return _ask(ctx, incomplete, lambda admin: admin.topic_list())


def complete_group(ctx: typer.Context, incomplete: str) -> list[str]:
    from ferry.admin import groups

    return _ask(
        ctx, incomplete, lambda admin: groups.all_groups(admin, admin.master_addrs().values())
    )


def complete_broker_name(ctx: typer.Context, incomplete: str) -> list[str]:
    return _ask(ctx, incomplete, lambda admin: admin.cluster_info().brokers)


def complete_broker_addr(ctx: typer.Context, incomplete: str) -> list[str]:
    return _ask(
        ctx,
        incomplete,
        lambda admin: (
            a for b in admin.cluster_info().brokers.values() for a in b.broker_addrs.values()
        ),
    )


def complete_cluster(ctx: typer.Context, incomplete: str) -> list[str]:
    return _ask(ctx, incomplete, lambda admin: admin.cluster_info().clusters)
