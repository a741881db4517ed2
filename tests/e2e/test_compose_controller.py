"""Controller mode in containers (deploy/docker-compose.yml, `--profile ha --profile broker-b`):
etcd and the controller, broker-a as three replicas each a `ferry serve broker` tree in its own
container, and broker-b. A message sent is consumed; `docker kill` of the master's container
(the loss of its machine) has the controller elect another replica, and a send to broker-a
succeeds again within a bound; broker-b is untouched."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
from e2e_support import consume_all
from failover_support import has_topic
from ha_support import broker_ids, status
from itest_support import wait_for

from ferry.admin import Admin
from ferry.client import (
    BrokerNotExistError,
    FerryError,
    Message,
    MessageQueue,
    Producer,
    SendStatus,
    TopicNotExistError,
)
from ferry.protocol.messages import (
    ClusterInfoReply,
    ControllerGetSyncStateDataRequest,
    ControllerSyncStateDataReply,
    GetClusterInfoRequest,
)
from ferry.protocol.messages.controller import BrokerGroupState

if TYPE_CHECKING:
    from conftest import ComposeStack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "E2EController"
# from the kill to the next acknowledged send on broker-a: the controller's heartbeat timeout
# (5 s in the compose file) plus an election and the new master's restart; about 9 s here
FAILOVER_BOUND_S = 20.0


def controller_addr(stack: ComposeStack) -> str:
    return f"{stack.settings['PUBLISH_HOST']}:{stack.settings['CONTROLLER_PORT']}"


def broker_a_state(stack: ComposeStack) -> BrokerGroupState | None:
    reply = status(controller_addr(stack), ControllerGetSyncStateDataRequest())
    assert isinstance(reply, ControllerSyncStateDataReply), reply
    return next((g for g in reply.groups if g.broker_name == "broker-a"), None)


def all_in_sync(stack: ComposeStack) -> BrokerGroupState | None:
    state = broker_a_state(stack)
    return state if state is not None and len(state.sync_state_set) == 3 else None


def routed_to_both(stack: ComposeStack) -> bool:
    with Admin(stack.namesrv) as admin:
        try:
            route = admin.topic_route(TOPIC)
        except TopicNotExistError:  # until the masters' next registration carries it
            return False
    return {q.broker_name for q in route.queue_datas} == {"broker-a", "broker-b"}


def synced_to_replicas(stack: ComposeStack) -> bool:
    info = status(stack.namesrv, GetClusterInfoRequest())
    assert isinstance(info, ClusterInfoReply), info
    addrs = info.brokers["broker-a"].broker_addrs.values()
    return len(addrs) == 3 and all(has_topic(addr, TOPIC) for addr in addrs)


def send_to(producer: Producer, broker: str, body: bytes) -> bool:
    """A send to the first queue of that broker group (a MessageQueueSelector)."""

    def pick(queues: list[MessageQueue], _msg: Message, _arg: object) -> MessageQueue:
        for queue in queues:
            if queue.broker_name == broker:
                return queue
        raise BrokerNotExistError(f"no write queue on {broker} in the route")  # not yet

    try:
        result = producer.send(Message(TOPIC, body), pick, None)
    except FerryError:
        return False
    return result.status is SendStatus.SEND_OK and result.queue.broker_name == broker


def test_killing_the_master_container_elects_another_replica(
    controller_stack: ComposeStack,
) -> None:
    stack = controller_stack
    before = wait_for(lambda: all_in_sync(stack), 90, "broker-a's three replicas in sync")
    for name in ("broker-a", "broker-b"):
        wait_for(lambda n=name: 0 in broker_ids(stack.namesrv, n), 30, f"{name}'s master routed")
    with Admin(stack.namesrv) as admin:
        assert len(admin.create_topic(TOPIC, 2, 2)) == 2  # broker-a's master and broker-b
    wait_for(lambda: routed_to_both(stack), 30, "the topic routed to both groups")
    # a replica copies topics from its master every slaveSynchronizeInterval; one elected
    # before that would not have the topic (as RocketMQ's slaves): wait, as operators do
    wait_for(lambda: synced_to_replicas(stack), 30, "the topic copied to broker-a's slaves")

    with Producer("e2e-controller", stack.namesrv, send_timeout_ms=2000) as producer:
        sent = {b"a-before", b"b-before"}
        assert send_to(producer, "broker-a", b"a-before")
        assert send_to(producer, "broker-b", b"b-before")
        consume_all(stack.namesrv, "e2e-controller-1", TOPIC, sent)

        master = f"broker-a-{before.master_id}"
        killed_at = time.monotonic()
        stack.kill(master)  # SIGKILL to the container: its machine is gone
        # broker-b takes sends while broker-a has no master
        assert send_to(producer, "broker-b", b"b-during")
        wait_for(
            lambda: send_to(producer, "broker-a", b"a-after"),
            60,
            "a send acknowledged by broker-a's new master",
        )
        took = time.monotonic() - killed_at
        sent |= {b"b-during", b"a-after"}

    after = broker_a_state(stack)
    assert after is not None
    print(
        f"{master} killed: broker-a's replica {after.master_id} master at epoch {after.epoch} "
        f"(was {before.master_id} at {before.epoch}); a send acknowledged after {took:.1f} s"
    )
    assert after.master_id != before.master_id
    assert after.epoch > before.epoch
    assert before.master_id not in after.sync_state_set
    assert took < FAILOVER_BOUND_S, took
    health = stack.health()
    assert health[master] == "exited"  # stays down: killed through Docker
    assert all(state == "healthy" for name, state in health.items() if name != master), health
    # the new master kept what the old one acknowledged; a new group reads everything
    consume_all(stack.namesrv, "e2e-controller-2", TOPIC, sent, timeout=60)
