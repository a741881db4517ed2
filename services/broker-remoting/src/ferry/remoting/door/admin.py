"""The door's admin routes (see door/__init__.py): not written yet."""

from __future__ import annotations

from ferry.remoting.processors import BrokerProcessors
from ferry.runtime.remoting_door import Route


def routes(processors: BrokerProcessors) -> dict[int, Route]:
    del processors
    return {}
