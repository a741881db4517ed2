"""Connection events of a peer, for the few places that must act when one drops or comes back.

ZeroMQ reconnects by itself and says nothing: a request that a peer lost when it was killed
is only seen as a timeout, and a peer restarted empty is not seen at all. A socket monitor on
the peer's DEALER reports those events to the service's loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from ferry.runtime.service import Peer, Service


def watch_peer(service: Service, peer: Peer, events: int, on_event: Callable[[], None]) -> None:
    """Calls on_event from the loop after any of `events` (zmq.EVENT_* bits) on peer's
    connection; once per loop turn however many arrived together."""
    # the runtime's Peer has no public socket; its monitor is the only use of it outside
    monitor = peer._socket.get_monitor_socket(events)

    def on_readable(sock: zmq.Socket[Any]) -> None:
        seen = False
        while sock.poll(0):
            seen |= bool(recv_monitor_message(sock, zmq.NOBLOCK)["event"] & events)
        if seen:
            on_event()

    service.add_reader(monitor, on_readable)  # closed with the service's context on stop
