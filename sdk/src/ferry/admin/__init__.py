"""Ferry's admin tools, apart from the client as RocketMQ keeps its admin tools apart: Admin
(mqadmin's operations: topics, groups, offsets, brokers, message queries, users and ACLs),
ControllerAdmin (the controller's commands) and, for asyncio, ferry.admin.aio.Admin.

from ferry.admin import Admin

with Admin("127.0.0.1:9876") as admin:
    print(admin.topic_list())

ferry.admin uses ferry.client; ferry.client never imports ferry.admin (it only names Admin,
ControllerAdmin and PullResult lazily, for the SDK's users).
"""

from ferry.admin.admin import Admin
from ferry.admin.consume_progress import GroupLag, QueueProgress
from ferry.admin.controller import ControllerAdmin
from ferry.admin.locator import BrokerLocator
from ferry.admin.queries import PullResult

__all__ = [
    "Admin",
    "BrokerLocator",
    "ControllerAdmin",
    "GroupLag",
    "PullResult",
    "QueueProgress",
]
