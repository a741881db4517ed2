"""How name servers and controllers learn the users (authentication on, issue 27).

They check signatures and ACLs like a broker does, but users are created on brokers (as in
RocketMQ): each master's remoting pushes its users and ACLs to every name server and
controller, sealed with the cluster's inner secret key (ferry.protocol.auth.seal), whenever
they change and every few seconds.
"""

from __future__ import annotations

from typing import TypeAlias

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import Request


class PushAuthSnapshotRequest(Request, frozen=True, tag="push_auth_snapshot"):
    """sealed: seal(inner secret key, msgpack(AuthSnapshot)); answered OkReply."""

    code = RequestCode.PUSH_AUTH_SNAPSHOT
    broker_name: str
    version: int
    sealed: bytes
    # the pushing broker's cluster: what a name server or controller, which belong to no one
    # cluster, checks `Cluster:<name>` permissions of that group's users against
    cluster: str = ""


SecurityRequest: TypeAlias = PushAuthSnapshotRequest
