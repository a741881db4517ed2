"""The broker's door, put together: every module's routes on one RemotingDoor."""

from __future__ import annotations

from ferry.remoting.door import admin, consume, notices, produce
from ferry.remoting.processors import BrokerProcessors
from ferry.runtime.remoting_door import RemotingDoor, Route
from ferry.runtime.service import Service


def door_routes(
    processors: BrokerProcessors, clients: consume.DoorClients | None = None
) -> dict[int, Route]:
    routes: dict[int, Route] = {}
    routes.update(produce.routes(processors))
    routes.update(consume.routes(processors, clients))
    routes.update(admin.routes(processors))
    return routes


def start_door(
    service: Service, host: str, port: int, processors: BrokerProcessors
) -> RemotingDoor:
    # a closed connection unregisters the clients whose heartbeats came on it
    clients = consume.DoorClients()
    door = RemotingDoor(
        service,
        host,
        port,
        door_routes(processors, clients),
        name="rocketmq",
        to_notice=notices.to_notice,
        on_close=lambda conn: clients.closed(door, conn),
    )
    return door
