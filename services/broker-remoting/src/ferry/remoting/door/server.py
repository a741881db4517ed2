"""The broker's door, put together: every module's routes on one RemotingDoor."""

from __future__ import annotations

from ferry.remoting.door import admin, client_calls, consume, notices, produce
from ferry.remoting.processors import BrokerProcessors
from ferry.runtime.remoting_door import RemotingDoor, Route
from ferry.runtime.service import Service


def door_routes(
    processors: BrokerProcessors, clients: consume.DoorClients | None = None
) -> dict[int, Route]:
    clients = clients or consume.DoorClients()
    routes: dict[int, Route] = {}
    routes.update(produce.routes(processors))
    routes.update(consume.routes(processors, clients))
    routes.update(client_calls.routes(clients, processors.handlers()))
    routes.update(admin.routes(processors))
    return routes


def open_door(service: Service, host: str, port: int) -> RemotingDoor:
    """The door, listening from now on, with no routes yet: its address is known before the
    processors are built (stored records carry it as their store host), serve() adds them."""
    return RemotingDoor(service, host, port, {}, name="rocketmq", to_notice=notices.to_notice)


def serve(door: RemotingDoor, processors: BrokerProcessors) -> None:
    # a closed connection unregisters the clients whose heartbeats came on it
    clients = consume.DoorClients()
    door.routes.update(door_routes(processors, clients))
    door.on_close = lambda conn: clients.closed(door, conn)
