"""The broker's door, put together: every module's routes on one RemotingDoor."""

from __future__ import annotations

from ferry.remoting.door import admin, consume, notices, produce
from ferry.remoting.processors import BrokerProcessors
from ferry.runtime.remoting_door import RemotingDoor, Route
from ferry.runtime.service import Service


def door_routes(processors: BrokerProcessors) -> dict[int, Route]:
    routes: dict[int, Route] = {}
    for module in (produce, consume, admin):
        routes.update(module.routes(processors))
    return routes


def start_door(
    service: Service, host: str, port: int, processors: BrokerProcessors
) -> RemotingDoor:
    return RemotingDoor(
        service,
        host,
        port,
        door_routes(processors),
        name="rocketmq",
        to_notice=notices.to_notice,
    )
