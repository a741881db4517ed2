"""A broker tree's own channel (controller mode): the broker agent, a process of the
`ferry serve broker` tree, asks the tree's supervisor what runs where and to restart services
with new broker.conf keys (a role change). The supervisor serves it on loopback, as an
internal port: only the cluster's own services may ask.
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import Reply, Request


class TreeProcess(msgspec.Struct, frozen=True, omit_defaults=True):
    """One process of the tree as its supervisor sees it now."""

    name: str  # the service: broker-store, broker-remoting, ...
    pid: int
    announced: bool = False  # it printed its READY line
    alive: bool = False


class TreeStatusRequest(Request, frozen=True, tag="tree_status"):
    code = RequestCode.TREE_STATUS


class TreeStatusReply(Reply, frozen=True, tag="tree_status_reply"):
    """The group's endpoints (pinned across restarts) and its processes."""

    broker_addr: str = ""  # remoting, host:port
    ha_addr: str = ""  # the ha-replicator, host:port
    store_endpoint: str = ""
    processes: list[TreeProcess] = []


class TreeReconfigureRequest(Request, frozen=True, tag="tree_reconfigure"):
    """Restart every process of `service` with `settings` added to its broker.conf keys, now
    and at any later restart (Supervisor.reconfigure). Answered OkReply once queued."""

    code = RequestCode.TREE_RECONFIGURE
    service: str
    settings: dict[str, str] = {}


# this role's requests and replies: AnyRequest and AnyReply (the package) join them
TreeRequest: TypeAlias = TreeStatusRequest | TreeReconfigureRequest
TreeReply: TypeAlias = TreeStatusReply
