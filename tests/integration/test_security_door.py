"""Every request code of RocketMQ's protocol, on both RocketMQ doors of a secure cluster (the
name server's and the broker's), is refused and changes nothing (issue 40 §5).

The codes come from the protocol's table (ferry.protocol.codes.RequestCode, every code below
Ferry's own 10000), so a code served later is covered without anyone adding it here. Each goes
to each door:
  - unsigned, as a client without credentials: NO_PERMISSION (16), whatever the code;
  - signed with a wrong secret key: NO_PERMISSION;
  - signed correctly by a Normal user with no ACL, with header fields naming the test's topic
    and group where the code has a sample: never SUCCESS.
Root's correctly signed requests are served (so the refusals are the ACL's, not a signature
the door cannot check), and stored data, offsets, metadata and users read the same after.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from itest_support import wait_for
from security_support import (
    GROUP,
    INNER,
    NOBODY,
    ROOT,
    TOPIC,
    WRONG,
    SecureCluster,
    ask,
    code_of,
    start_secure,
    state,
)

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.protocol.auth import Credentials
from ferry.protocol.codes import RequestCode, ResponseCode
from ferry.protocol.messages import PingRequest
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.runtime.remoting_auth import ACCESS_KEY, SIGNATURE, signature, signed_content
from ferry.runtime.testing.remoting_client import RemotingClient

CODES = sorted(c for c in RequestCode if c < 10000)

# header fields that make a request touch the test's topic and group
SAMPLES: dict[int, dict[str, str]] = {
    RequestCode.SEND_MESSAGE: {
        "producerGroup": "pg-door",
        "topic": TOPIC,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "1",
        "flag": "0",
        "properties": "",
    },
    RequestCode.PULL_MESSAGE: {
        "consumerGroup": GROUP,
        "topic": TOPIC,
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "0",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
    },
    RequestCode.QUERY_CONSUMER_OFFSET: {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"},
    RequestCode.UPDATE_CONSUMER_OFFSET: {
        "consumerGroup": GROUP,
        "topic": TOPIC,
        "queueId": "1",
        "commitOffset": "2",
    },
    RequestCode.GET_MAX_OFFSET: {"topic": TOPIC, "queueId": "0"},
    RequestCode.GET_MIN_OFFSET: {"topic": TOPIC, "queueId": "0"},
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: {"consumerGroup": GROUP},
    # answered from several requests of its own: each checked as the client's
    RequestCode.GET_CONSUME_STATS: {"consumerGroup": GROUP, "topic": TOPIC},
    RequestCode.GET_TOPIC_STATS_INFO: {"topic": TOPIC},
    RequestCode.QUERY_MESSAGE: {
        "topic": TOPIC,
        "key": "k",
        "maxNum": "32",
        "beginTimestamp": "0",
        "endTimestamp": "9999999999999",
    },
    RequestCode.GET_ALL_TOPIC_CONFIG: {},
    RequestCode.GET_ROUTEINFO_BY_TOPIC: {"topic": TOPIC},
    RequestCode.UPDATE_AND_CREATE_TOPIC: {
        "topic": "door-made",
        "defaultTopic": "TBW102",
        "readQueueNums": "4",
        "writeQueueNums": "4",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
    },
    RequestCode.DELETE_TOPIC_IN_BROKER: {"topic": TOPIC},
    RequestCode.DELETE_TOPIC_IN_NAMESRV: {"topic": TOPIC},
    RequestCode.DELETE_SUBSCRIPTIONGROUP: {"groupName": GROUP},
    RequestCode.PUT_KV_CONFIG: {"namespace": "ns", "key": "k", "value": "v"},
    RequestCode.DELETE_KV_CONFIG: {"namespace": "ns", "key": "k"},
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: {"brokerName": "broker-a"},
}
BODIES: dict[int, bytes] = {
    RequestCode.SEND_MESSAGE: b"door message",
    RequestCode.HEART_BEAT: json.dumps(
        {
            "clientID": "door-client",
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": GROUP,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}],
                    "unitMode": False,
                }
            ],
        }
    ).encode(),
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: json.dumps({"groupName": GROUP}).encode(),
}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    c = start_secure(Path(tmp_path_factory.mktemp("secure-door")), rocketmq_port=0)
    try:
        with Admin(c.namesrv, credentials=ROOT) as admin:
            admin.create_topic(TOPIC, 2, 2, broker_addr=c.cluster.broker_addr)
            admin.create_user(NOBODY.access_key, NOBODY.secret_key, "Normal")
        with Producer("pg", c.namesrv, credentials=ROOT) as producer:
            for i in range(3):
                producer.send(Message(TOPIC, f"m{i}".encode()))
        # the name server knows users once the master pushed them
        wait_for(
            lambda: (
                code_of(ask(c.ports()["namesrv"], PingRequest(), NOBODY))
                == ResponseCode.NO_PERMISSION
            ),
            timeout=20,
            what="the name server to know user nobody",
        )
        yield c
    finally:
        c.stop()


def doors(c: SecureCluster) -> dict[str, str]:
    local = c.cluster.local
    assert local.rocketmq_addr and local.broker_rocketmq_addr
    return {"namesrv door": local.rocketmq_addr, "broker door": local.broker_rocketmq_addr}


def call(addr: str, code: int, creds: Credentials | None) -> RemotingCommand:
    fields = dict(SAMPLES.get(code, {}))
    body = BODIES.get(code, b"")
    if creds is not None:
        fields[ACCESS_KEY] = creds.access_key
        probe = RemotingCommand(code=code, ext_fields=fields, body=body)
        fields[SIGNATURE] = signature(creds.secret_key, signed_content(probe))
    with RemotingClient(addr) as client:
        return client.call(code, fields, body, timeout_s=10)


def test_every_request_code_is_refused_on_both_doors(
    secure: SecureCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    before = state(secure)
    failures = []
    calls = 0
    for name, addr in doors(secure).items():
        for code in CODES:
            for creds in (None, WRONG):
                got = call(addr, code, creds)
                calls += 1
                if got.code != ResponseCode.NO_PERMISSION:
                    who = creds.access_key if creds else "no credentials"
                    failures.append(f"{code.name} on {name} as {who}: {got.code} {got.remark}")
            got = call(addr, code, NOBODY)
            calls += 1
            if got.code == ResponseCode.SUCCESS:
                failures.append(f"{code.name} on {name} served to nobody: {got.remark}")
    assert failures == []
    assert state(secure) == before
    with capsys.disabled():
        print(
            f"\ndoor refusals: {len(CODES)} request codes x 2 doors x 3 = {calls} calls "
            "refused, nothing changed"
        )


def test_root_is_served_and_nobody_is_told_what_is_missing(secure: SecureCluster) -> None:
    door = doors(secure)
    route = call(door["namesrv door"], RequestCode.GET_ROUTEINFO_BY_TOPIC, ROOT)
    assert route.code == ResponseCode.SUCCESS, route.remark
    assert json.loads(route.body)["brokerDatas"][0]["brokerAddrs"]["0"] == door["broker door"]
    sent = call(door["broker door"], RequestCode.SEND_MESSAGE, ROOT)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    refused = call(door["broker door"], RequestCode.SEND_MESSAGE, NOBODY)
    assert refused.code == ResponseCode.NO_PERMISSION
    assert "Pub" in refused.remark and TOPIC in refused.remark
    # the cluster's own services may sign for the door too
    inner = call(door["broker door"], RequestCode.GET_MAX_OFFSET, INNER)
    assert inner.code == ResponseCode.SUCCESS, inner.remark
