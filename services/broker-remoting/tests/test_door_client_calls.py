"""The calls RocketMQ's tools make on a consumer through the broker's door (door/client_calls.py):
the broker asks the client on the client's own connection and relays its answer to the tool.
Both sides are hand-built remoting clients on a real cluster: one heartbeats as a consumer and
answers (or does not), the other asks as mqadmin would."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ferry.client import Message, Producer
from ferry.protocol import record
from ferry.protocol.rocketmq.codes import RequestCode, ResponseCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.remoting.door.client_calls import ASK_TIMEOUT_S
from ferry.runtime.launcher import LocalCluster
from ferry.runtime.testing.remoting_client import RemotingClient, consumer_heartbeat

pytestmark = pytest.mark.integration

TOPIC = "DoorClientCalls"
GROUP = "cg-door-calls"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, door_cluster: Any) -> Iterator[LocalCluster]:
    with door_cluster(tmp_path_factory.mktemp("door-calls"), topic=TOPIC, queues=2) as local:
        yield local


def heartbeat(client: RemotingClient, client_id: str) -> None:
    got = client.call(RequestCode.HEART_BEAT, body=consumer_heartbeat(client_id, GROUP, TOPIC))
    assert got.code == ResponseCode.SUCCESS, got.remark


def asked(consumer: RemotingClient, code: int) -> RemotingCommand:
    """The next request the broker sends the consumer with that code (notices skipped)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        cmd = consumer.receive(max(0.01, deadline - time.monotonic()))
        if cmd is not None and not cmd.is_response and cmd.code == code:
            return cmd
    raise AssertionError(f"the broker did not ask the consumer {code}")


def answer_to(tool: RemotingClient, opaque: int, timeout_s: float = 10) -> RemotingCommand:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        cmd = tool.receive(max(0.01, deadline - time.monotonic()))
        if cmd is not None and cmd.is_response and cmd.opaque == opaque:
            return cmd
    raise AssertionError(f"no answer to the tool's request {opaque} within {timeout_s} s")


def running_info_fields(client_id: str) -> dict[str, str]:
    return {"consumerGroup": GROUP, "clientId": client_id, "jstackEnable": "false"}


def test_running_info_is_asked_of_the_client_and_its_answer_relayed(
    cluster: LocalCluster,
) -> None:
    addr = cluster.broker_rocketmq_addr
    with RemotingClient(addr) as consumer, RemotingClient(addr) as tool:
        heartbeat(consumer, "10.0.0.7@calls-a")
        tool.send(RequestCode.CONSUMER_SEND_MSG_BACK)  # the tool's opaques are its own
        # a tool's credential fields (unchecked here: authentication is off) stay at the broker
        signed = {**running_info_fields("10.0.0.7@calls-a"), "AccessKey": "ak", "Signature": "s"}
        opaque = tool.send(RequestCode.GET_CONSUMER_RUNNING_INFO, signed)
        request = asked(consumer, RequestCode.GET_CONSUMER_RUNNING_INFO)
        assert request.ext_fields == running_info_fields("10.0.0.7@calls-a")
        info = {"properties": {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"}, "mqTable": {}}
        consumer.respond(request, body=json.dumps(info).encode())
        got = answer_to(tool, opaque)
    assert (got.code, json.loads(got.body)) == (ResponseCode.SUCCESS, info)


def test_a_client_the_broker_cannot_reach_is_not_online(cluster: LocalCluster) -> None:
    # no connection of it here; a Ferry SDK consumer (ZeroMQ: the broker cannot call it) alike
    with RemotingClient(cluster.broker_rocketmq_addr) as tool:
        got = tool.call(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info_fields("nobody@x"))
    assert got.code == ResponseCode.SYSTEM_ERROR
    assert "not online" in got.remark


def test_a_client_that_does_not_answer_gets_the_tool_a_timeout_error(
    cluster: LocalCluster,
) -> None:
    addr = cluster.broker_rocketmq_addr
    with RemotingClient(addr) as consumer, RemotingClient(addr) as tool:
        heartbeat(consumer, "10.0.0.7@calls-silent")
        started = time.monotonic()
        got = tool.call(
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            running_info_fields("10.0.0.7@calls-silent"),
            timeout_s=ASK_TIMEOUT_S + 5,
        )
        waited = time.monotonic() - started
        late = asked(consumer, RequestCode.GET_CONSUMER_RUNNING_INFO)
        consumer.respond(late, body=b"{}")  # too late: dropped, nothing reaches the tool
        # the door goes on serving both
        heartbeat(consumer, "10.0.0.7@calls-silent")
        assert tool.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP}).code == 0
    assert got.code == ResponseCode.SYSTEM_ERROR
    assert "did not answer" in got.remark
    assert ASK_TIMEOUT_S - 0.5 <= waited < ASK_TIMEOUT_S + 3


def test_a_client_that_closes_while_asked_gets_the_tool_an_error_at_once(
    cluster: LocalCluster,
) -> None:
    addr = cluster.broker_rocketmq_addr
    with RemotingClient(addr) as tool:
        consumer = RemotingClient(addr)
        heartbeat(consumer, "10.0.0.7@calls-gone")
        started = time.monotonic()
        opaque = tool.send(
            RequestCode.GET_CONSUMER_RUNNING_INFO, running_info_fields("10.0.0.7@calls-gone")
        )
        asked(consumer, RequestCode.GET_CONSUMER_RUNNING_INFO)
        consumer.close()
        got = answer_to(tool, opaque)
    assert got.code == ResponseCode.SYSTEM_ERROR
    assert time.monotonic() - started < ASK_TIMEOUT_S  # not left to the timeout


def test_consume_message_directly_sends_the_client_the_stored_message(
    cluster: LocalCluster,
) -> None:
    with Producer("pg-door-calls", cluster.namesrv_addr) as producer:
        sent = producer.send(Message(TOPIC, b"direct-body", tags="D", keys=["dk"]))
    addr = cluster.broker_rocketmq_addr
    with RemotingClient(addr) as consumer, RemotingClient(addr) as tool:
        heartbeat(consumer, "10.0.0.7@calls-direct")
        fields = {
            "consumerGroup": GROUP,
            "clientId": "10.0.0.7@calls-direct",
            "msgId": sent.offset_msg_id,
            "brokerName": "broker-a",
        }
        opaque = tool.send(RequestCode.CONSUME_MESSAGE_DIRECTLY, fields)
        request = asked(consumer, RequestCode.CONSUME_MESSAGE_DIRECTLY)
        [message] = list(record.iter_records(request.body))
        result = {"order": False, "autoCommit": True, "consumeResult": "CR_SUCCESS"}
        consumer.respond(request, body=json.dumps(result).encode())
        got = answer_to(tool, opaque)
        # an id that is not an offset message id is refused without asking the client
        bad = tool.call(RequestCode.CONSUME_MESSAGE_DIRECTLY, {**fields, "msgId": "zz"})
    assert (message.body, message.properties["TAGS"], message.properties["KEYS"]) == (
        b"direct-body",
        "D",
        "dk",
    )
    assert request.ext_fields["msgId"] == sent.offset_msg_id
    assert (got.code, json.loads(got.body)) == (ResponseCode.SUCCESS, result)
    assert bad.code == ResponseCode.SYSTEM_ERROR
