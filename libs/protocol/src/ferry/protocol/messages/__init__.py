"""Every request and reply on the wire, as frozen tagged msgspec Structs: the one import path.

Rules that keep old peers working (docs/protocol.md): a new field always has a default; a
field's type never changes; unknown fields are ignored; a tag is never reused.
Each request names its RocketMQ request code in `code` (Ferry-only requests use 10000+).

The structs live in one module per role (common, namesrv, client, store, index, scheduler, ha,
admin, controller, auth, security, tree); each spells its own request and reply unions beside
its structs, so mypy sees every member, and AnyRequest / AnyReply below join them.
test_messages.py fails when a Request or Reply subclass is left out of its module's union.
Tags are explicit strings, so moving a struct between modules changes nothing on the wire.
"""

from __future__ import annotations

from typing import TypeAlias, get_args

from ferry.protocol.messages import (
    admin,
    auth,
    broker_admin,
    client,
    common,
    controller,
    ha,
    index,
    namesrv,
    namesrv_admin,
    pop,
    reply,
    scheduler,
    security,
    store,
    tree,
)
from ferry.protocol.messages.admin import *  # noqa: F403
from ferry.protocol.messages.auth import *  # noqa: F403
from ferry.protocol.messages.broker_admin import *  # noqa: F403
from ferry.protocol.messages.client import *  # noqa: F403
from ferry.protocol.messages.common import *  # noqa: F403
from ferry.protocol.messages.common import Reply, Request
from ferry.protocol.messages.controller import *  # noqa: F403
from ferry.protocol.messages.ha import *  # noqa: F403
from ferry.protocol.messages.index import *  # noqa: F403
from ferry.protocol.messages.namesrv import *  # noqa: F403
from ferry.protocol.messages.namesrv_admin import *  # noqa: F403
from ferry.protocol.messages.pop import *  # noqa: F403
from ferry.protocol.messages.reply import *  # noqa: F403
from ferry.protocol.messages.scheduler import *  # noqa: F403
from ferry.protocol.messages.security import *  # noqa: F403
from ferry.protocol.messages.store import *  # noqa: F403
from ferry.protocol.messages.tree import *  # noqa: F403

AnyRequest: TypeAlias = (
    common.CommonRequest
    | namesrv.NamesrvRequest
    | namesrv_admin.NamesrvAdminRequest
    | client.ClientRequest
    | pop.PopRequest
    | reply.ReplyRequest
    | store.StoreRequest
    | index.IndexRequest
    | scheduler.SchedulerRequest
    | ha.HaRequest
    | admin.AdminRequest
    | broker_admin.BrokerAdminRequest
    | controller.ControllerRequest
    | auth.AuthRequest
    | security.SecurityRequest
    | tree.TreeRequest
)

AnyReply: TypeAlias = (
    common.CommonReply
    | namesrv.NamesrvReply
    | namesrv_admin.NamesrvAdminReply
    | client.ClientReply
    | pop.PopReply
    | reply.ReplyReply
    | store.StoreReply
    | index.IndexReply
    | scheduler.SchedulerReply
    | ha.HaReply
    | admin.AdminReply
    | broker_admin.BrokerAdminReply
    | controller.ControllerReply
    | auth.AuthReply
    | tree.TreeReply
)


def request_types() -> list[type[Request]]:
    return list(get_args(AnyRequest))


def reply_types() -> list[type[Reply]]:
    return list(get_args(AnyReply))
