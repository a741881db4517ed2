"""A pop group's progress beyond its offsets: per broker, the messages popped, acked, revived
(not acked in their invisible time) and in flight now, as the broker's revive service counts
them (since its start, from the revive log it read back). Offsets and lag of a pop group are
its committed offsets, which pops advance (Admin.consumer_progress)."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.admin.broker_ops import scheduler_status
from ferry.admin.locator import BrokerLocator
from ferry.protocol.errors import FerryError


@dataclass(frozen=True)
class PopProgress:
    broker_name: str
    popped: int
    acked: int
    revived: int
    in_flight: int


def pop_progress(brokers: BrokerLocator, group: str) -> list[PopProgress]:
    """One row per master whose revive service knows the group; [] for a group never popped
    (or brokers without a scheduler)."""
    out: list[PopProgress] = []
    for name, addr in brokers.master_addrs().items():
        try:
            extra = scheduler_status(brokers, addr).extra
        except FerryError:
            continue  # no scheduler there
        prefix = f"pop.{group}."
        figures = {k[len(prefix) :]: int(v) for k, v in extra.items() if k.startswith(prefix)}
        if figures:
            out.append(
                PopProgress(
                    name,
                    figures.get("popped", 0),
                    figures.get("acked", 0),
                    figures.get("revived", 0),
                    figures.get("inFlight", 0),
                )
            )
    return out
