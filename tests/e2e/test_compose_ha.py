"""The slave group of deploy/docker-compose.yml (`--profile slave`) for real: a SYNC_MASTER
broker group and its slave group, each service in its own container. Every send the master
acknowledged is on the slave, and when the master group's containers are killed, consumers
go on reading from the slave through its published port."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from e2e_support import SteadyLoad, consume_all
from ha_support import status
from itest_support import wait_for

from ferry.admin import Admin
from ferry.protocol.messages import GetAllTopicConfigRequest, TopicConfigListReply

if TYPE_CHECKING:
    from conftest import ComposeStack

# compose up waits on a chain of health checks: minutes on a loaded machine
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

MASTER_GROUP = ("broker-remoting", "broker-ha", "broker-store")


def slave_addr(stack: ComposeStack) -> str:
    return f"{stack.settings['BROKER_IP1']}:{stack.settings['NATIVE_SLAVE_BROKER_PORT']}"


def test_consumers_read_every_acknowledged_message_from_the_slave_after_the_master_dies(
    ha_stack: ComposeStack,
) -> None:
    with SteadyLoad(ha_stack.namesrv, "E2EHa") as load:
        wait_for(lambda: len(load.acked) >= 200, timeout=90, what="200 SEND_OK under SYNC_MASTER")
        with Admin(ha_stack.namesrv) as admin:
            route = admin.topic_route("E2EHa")
        # both groups serve the topic: the master as brokerId 0, the slave as 1
        assert route.broker_datas[0].broker_addrs == {
            0: ha_stack.broker_addr,
            1: slave_addr(ha_stack),
        }

        # the topic was auto-created on the master by the first send; a slave serves it once
        # its metadata sync (slaveSynchronizeInterval) brought the config over, as RocketMQ's
        # SlaveSynchronize. Killing the master sooner would test that window, not failover.
        def slave_has_topic() -> bool:
            reply = status(slave_addr(ha_stack), GetAllTopicConfigRequest())
            return isinstance(reply, TopicConfigListReply) and any(
                t.topic_name == "E2EHa" for t in reply.topics
            )

        wait_for(slave_has_topic, timeout=30, what="the topic's config synced to the slave")
        for service in MASTER_GROUP:  # SIGKILL: nothing flushed or handed over
            ha_stack.kill(service)
        failures = load.failures
        wait_for(lambda: load.failures > failures, timeout=30, what="sends failing")
    acked = set(load.acked)
    assert len(acked) >= 200

    # once the name servers drop the master (brokerNotActiveTimeoutMillis), routes show only
    # the slave, and a consumer reads from it everything the master acknowledged
    with Admin(ha_stack.namesrv) as admin:
        wait_for(
            lambda: list(admin.topic_route("E2EHa").broker_datas[0].broker_addrs) == [1],
            timeout=60,
            what="the route to show only the slave",
        )
    try:
        got = consume_all(
            ha_stack.namesrv,
            "e2e-ha-reader",
            "E2EHa",
            acked,
            timeout=90,
            poll_namesrv_interval_ms=1000,
        )
    except pytest.fail.Exception as exc:
        pytest.fail(f"{exc}\n{ha_stack.logs('broker-s-remoting')}")
    assert acked <= {m.body for m in got}
    # records are byte-identical: their store host is the master's (its RocketMQ door's address,
    # where RocketMQ clients send a consumed message back)
    assert {m.store_host for m in got} <= {ha_stack.rocketmq_broker_addr}
