"""deploy/docker-compose.host.yml, the file of the multi-host guide, as three "hosts" on one
machine (the `hosts` fixture): three compose projects on the host's network, each with its
own loopback address as HOST_IP (127.0.0.21, .22, .23). The first runs the name server, etcd,
the controller and broker-a's replica 1; the others a replica each, found only through the
addresses in their settings. A message sent is consumed; losing the master's "host" (docker
kill) has a replica on another one elected, and sends are acknowledged again within a bound."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
from e2e_support import consume_all
from failover_support import has_topic
from ha_support import status
from itest_support import wait_for

from ferry.admin import Admin
from ferry.client import FerryError, Message, Producer, SendStatus
from ferry.protocol.messages import ControllerGetSyncStateDataRequest, ControllerSyncStateDataReply

if TYPE_CHECKING:
    from conftest import ComposeStack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "E2EHosts"
FAILOVER_BOUND_S = 20.0  # 5 s heartbeat timeout, an election, the new master's restart


def broker_a(controller: str) -> tuple[int, int, list[int]]:
    """broker-a's master id, epoch and in-sync set, as the controller has them."""
    reply = status(controller, ControllerGetSyncStateDataRequest())
    assert isinstance(reply, ControllerSyncStateDataReply), reply
    for group in reply.groups:
        if group.broker_name == "broker-a":
            return group.master_id, group.epoch, sorted(group.sync_state_set)
    return 0, 0, []


def send_ok(producer: Producer, body: bytes) -> bool:
    try:
        return producer.send(Message(TOPIC, body)).status is SendStatus.SEND_OK
    except FerryError:
        return False


def test_a_group_over_three_hosts_fails_over_to_another_host(hosts: list[ComposeStack]) -> None:
    settings = hosts[0].settings
    namesrv, controller = settings["NAMESRV_ADDR"], settings["CONTROLLER_ADDR"]
    wait_for(lambda: broker_a(controller)[2] == [1, 2, 3], 90, "three replicas in sync")
    master_id, epoch, _ = broker_a(controller)
    # each replica registered its own host's address (the one the others dial)
    addrs = [f"{stack.settings['HOST_IP']}:{settings['NATIVE_BROKER_A_PORT']}" for stack in hosts]
    with Admin(namesrv) as admin:

        def registered() -> bool:
            data = admin.cluster_info().brokers.get("broker-a")
            return (
                data is not None
                and 0 in data.broker_addrs
                and (sorted(data.broker_addrs.values()) == addrs)
            )

        wait_for(registered, 30, "the three replicas registered, the master as 0")
        admin.create_topic(TOPIC, 2, 2)

    with Producer("e2e-hosts", namesrv, send_timeout_ms=2000) as producer:
        wait_for(lambda: send_ok(producer, b"before"), 30, "a first acknowledged send")
        consume_all(namesrv, "e2e-hosts-1", TOPIC, {b"before"})
        # as an operator would: the new topic on every replica before losing a host
        wait_for(
            lambda: all(has_topic(addr, TOPIC) for addr in addrs), 30, "the topic on every host"
        )
        killed_at = time.monotonic()
        hosts[master_id - 1].kill("broker-a")  # the master's host is gone
        wait_for(lambda: send_ok(producer, b"after"), 60, "a send on another host's replica")
        took = time.monotonic() - killed_at

    new_id, new_epoch, in_sync = broker_a(controller)
    ips = [stack.settings["HOST_IP"] for stack in hosts]
    print(
        f"host {ips[master_id - 1]} lost: replica {new_id} on {ips[new_id - 1]} master at "
        f"epoch {new_epoch}, a send acknowledged after {took:.1f} s"
    )
    assert new_id not in (0, master_id)
    assert new_epoch > epoch
    assert master_id not in in_sync
    assert took < FAILOVER_BOUND_S, took
    consume_all(namesrv, "e2e-hosts-2", TOPIC, {b"before", b"after"})
