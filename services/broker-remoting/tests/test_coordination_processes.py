"""Consumer coordination on a real broker-remoting (with its store), driven over ZeroMQ:
notices to a group's members, retry topics, send-back, consumer groups of a topic."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.client.transport import Connection, expect
from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import QueryNotFoundError
from ferry.protocol.messages import (
    AnyReply,
    ConsumerData,
    ConsumerIdsChangedNotice,
    ConsumerSendMsgBackRequest,
    GetAllTopicConfigRequest,
    GroupListReply,
    HeartbeatRequest,
    OffsetEntry,
    OkReply,
    PingRequest,
    PullMessageReply,
    PullMessageRequest,
    QueryTopicConsumeByWhoRequest,
    SendMessageReply,
    SendMessageRequest,
    SubscriptionData,
    TopicConfigListReply,
    UnregisterClientRequest,
    UpdateConsumerOffsetRequest,
)
from ferry.protocol.record import encode_properties, encode_record, iter_records
from ferry.runtime.launcher import LocalCluster, start_broker_services

pytestmark = pytest.mark.integration

NOBODY_LISTENS = "127.0.0.1:1"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("coordination")
    with LocalCluster() as cluster:
        # retries wait for delay level 3 (held by the scheduler): short levels keep it quick
        start_broker_services(
            cluster,
            str(root),
            namesrv_addr=NOBODY_LISTENS,
            overrides={"messageDelayLevel": "100ms 100ms 100ms"},
        )
        yield cluster.broker_addr


class Member:
    """A connection that records the notices the broker sends it."""

    def __init__(self, addr: str, client_id: str) -> None:
        self.client_id = client_id
        self.notices: list[AnyReply] = []
        self.conn = Connection(addr, on_notice=lambda _a, body: self.notices.append(body))

    def heartbeat(self, group: str, model: str = "CLUSTERING") -> None:
        data = ConsumerData(group, "PUSH", model, subscriptions=[SubscriptionData("Coord")])
        assert self.conn.request(HeartbeatRequest(self.client_id, consumers=[data]))[0] == OkReply()

    def close(self) -> None:
        self.conn.close()


def notices(member: Member) -> list[AnyReply]:
    """The notices so far: the broker sends one right after the reply of the request that
    caused it, so once a later ping is answered, every earlier notice has arrived."""
    member.conn.request(PingRequest())
    return list(member.notices)


def test_members_are_told_when_their_group_changes(broker: str) -> None:
    a, b = Member(broker, "10.0.0.1@a"), Member(broker, "10.0.0.2@b")
    try:
        a.heartbeat("g-notice")
        b.heartbeat("g-notice")  # a new member: both are told
        a.heartbeat("g-notice")  # nothing changed: nobody is told
        notice = ConsumerIdsChangedNotice("g-notice")
        assert notices(a) == [notice, notice]
        assert notices(b) == [notice]
        b.conn.request(UnregisterClientRequest(b.client_id, consumer_group="g-notice"))
        assert notices(a) == [notice] * 3
        assert notices(b) == [notice]  # the leaver is not told
    finally:
        a.close()
        b.close()


def test_clustering_members_get_a_retry_topic_broadcasting_ones_do_not(broker: str) -> None:
    member = Member(broker, "10.0.0.3@c")
    try:
        member.heartbeat("g-clustered")
        member.heartbeat("g-broadcast", "BROADCASTING")
        reply = expect(member.conn.request(GetAllTopicConfigRequest()), TopicConfigListReply)
    finally:
        member.close()
    names = {t.topic_name: t for t in reply.topics}
    assert "%RETRY%g-broadcast" not in names
    retry = names["%RETRY%g-clustered"]
    assert (retry.read_queue_nums, retry.write_queue_nums) == (1, 1)


def test_send_back_stores_a_retry_copy_and_unknown_offsets_are_not_found(broker: str) -> None:
    conn = Connection(broker)
    try:
        raw = encode_record(b"Coord", b"payload", encode_properties({"TAGS": "T"}))
        request = SendMessageRequest("pg", "Coord", 0, default_topic="TBW102")
        sent = expect(conn.request(request, [raw]), SendMessageReply)
        back = ConsumerSendMsgBackRequest("g-back", sent.phys_offsets[0], origin_topic="Coord")
        assert conn.request(back)[0] == OkReply()
        # long polling: answered when the scheduler delivers the copy to the retry topic
        pulled = conn.request(PullMessageRequest("g-back", "%RETRY%g-back", 0, 0, suspend_ms=5000))
        assert expect(pulled, PullMessageReply).count == 1
        (copy,) = iter_records(bytes(pulled[1][0]))
        assert (copy.body, copy.reconsume_times, copy.properties["RETRY_TOPIC"]) == (
            b"payload",
            1,
            "Coord",
        )
        with pytest.raises(QueryNotFoundError) as missing:
            conn.request(ConsumerSendMsgBackRequest("g-back", sent.phys_offsets[0] + 1))
        assert missing.value.code == ResponseCode.QUERY_NOT_FOUND
    finally:
        conn.close()


def test_consumer_groups_of_a_topic_are_listed(broker: str) -> None:
    member = Member(broker, "10.0.0.4@d")
    try:
        member.heartbeat("g-live")
        entry = OffsetEntry("Coord", 0, 0)
        member.conn.request(UpdateConsumerOffsetRequest("g-committed", [entry]))
        reply = member.conn.request(QueryTopicConsumeByWhoRequest("Coord"))
    finally:
        member.close()
    groups = expect(reply, GroupListReply).groups
    assert {"g-live", "g-committed"} <= set(groups)
    assert groups == sorted(groups)
