"""ferry.proxy.convert: what a client sent read into typed values, and the replies the client
takes as they are (routes on the proxy, send entries, the server's Settings)."""

from __future__ import annotations

import hashlib
import zlib

from ferry.client.message import MessageQueue
from ferry.client.route import TopicRoute
from ferry.proxy import convert
from ferry.proxy.protocol import Code, DigestType, MessageType, Pb, Permission, definition
from ferry.proxy.routes import route_queues


def sent(**system: object) -> Pb:
    msg = definition.Message(body=b"payload", user_properties={"color": "blue"})
    msg.topic.name = "T"
    msg.system_properties.message_id = "01ABCDEF"
    for name, value in system.items():
        setattr(msg.system_properties, name, value)
    return msg


def test_inbound_reads_tag_keys_id_properties_and_tells_unset_from_empty() -> None:
    msg = sent(tag="TagA", message_type=MessageType.NORMAL)
    msg.system_properties.keys.extend(["k1", "k2"])
    got = convert.inbound(msg)
    assert (got.topic, got.body, got.tag, got.keys) == ("T", b"payload", "TagA", ("k1", "k2"))
    assert got.message_id == "01ABCDEF"
    assert got.user_properties == {"color": "blue"}
    assert got.message_type == MessageType.NORMAL
    assert got.message_group is None and got.delivery_seconds is None and got.digest is None
    assert convert.inbound(sent()).tag is None


def test_a_namespaced_topic_is_named_as_rocketmq_names_it() -> None:
    msg = sent()
    msg.topic.resource_namespace = "ns1"
    assert convert.inbound(msg).topic == "ns1%T"


def test_body_digests_are_upper_case_hex_as_the_client_compares_them() -> None:
    body = b"hello digest"
    assert convert.body_digest(body) == f"{zlib.crc32(body):08X}"
    assert convert.body_digest(b"") == "00000000"
    assert convert.body_digest(body, DigestType.MD5) == hashlib.md5(body).hexdigest().upper()
    assert convert.body_digest(body, DigestType.SHA1) == hashlib.sha1(body).hexdigest().upper()


def test_routes_name_the_proxy_broker_id_zero_and_each_queue_permission() -> None:
    route = TopicRoute(
        "T",
        write_queues=tuple(MessageQueue("T", "broker-a", i) for i in range(2)),
        read_queues=tuple(MessageQueue("T", "broker-a", i) for i in range(3)),
        master_addrs={"broker-a": "127.0.0.1:10911"},
    )
    queues = route_queues(route, (MessageType.NORMAL,))
    assert [(q.queue_id, q.permission) for q in queues] == [
        (0, Permission.READ_WRITE),
        (1, Permission.READ_WRITE),
        (2, Permission.READ),
    ]
    topic = definition.Resource(name="T")
    reply = convert.route_response(topic, queues, convert.endpoints("127.0.0.1", 8081))
    assert reply.status.code == Code.OK
    first = reply.message_queues[0]
    assert (first.topic.name, first.broker.name, first.broker.id) == ("T", "broker-a", 0)
    assert [(a.host, a.port) for a in first.broker.endpoints.addresses] == [("127.0.0.1", 8081)]
    assert first.broker.endpoints.scheme == 1  # IPv4
    assert list(first.accept_message_types) == [MessageType.NORMAL]
    assert convert.endpoints("proxy.local", 8081).scheme == 3  # DOMAIN_NAME


def test_send_replies_echo_ids_and_say_how_a_batch_went() -> None:
    ok = convert.SendEntry(Code.OK, "OK", "01A", 7)
    bad = convert.SendEntry(Code.MESSAGE_BODY_EMPTY, "the message body is empty", "01B")
    one = convert.send_response([ok])
    assert one.status.code == Code.OK
    assert (one.entries[0].message_id, one.entries[0].offset) == ("01A", 7)
    assert convert.send_response([bad]).status.code == Code.MESSAGE_BODY_EMPTY
    mixed = convert.send_response([ok, bad])
    assert mixed.status.code == Code.MULTIPLE_RESULTS
    assert [e.status.code for e in mixed.entries] == [Code.OK, Code.MESSAGE_BODY_EMPTY]


def test_a_producer_gets_a_body_limit_and_exponential_backoff() -> None:
    client = definition.Settings(client_type=1)
    client.publishing.max_body_size = 128 * 1024 * 1024
    client.publishing.topics.add(name="T")
    client.request_timeout.seconds = 3
    reply = convert.settings_command(client, convert.ServerSettings(max_body_size=4 << 20))
    assert reply.status.code == Code.OK
    got = reply.settings
    assert got.publishing.max_body_size == 4 << 20  # never 0: 0 refuses every send
    assert got.publishing.validate_message_type
    assert [t.name for t in got.publishing.topics] == ["T"]
    assert got.request_timeout.seconds == 3
    assert got.backoff_policy.max_attempts == 3
    assert got.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    assert got.backoff_policy.exponential_backoff.multiplier == 2.0


def test_a_push_consumer_gets_everything_in_its_first_reply() -> None:
    client = definition.Settings(client_type=2)
    client.subscription.group.name = "G"
    server = convert.ServerSettings(max_body_size=1, consume_backoff_ms=(10_000, 30_000))
    got = convert.settings_command(client, server).settings
    sub = got.subscription
    assert sub.group.name == "G"
    assert sub.HasField("fifo") and not sub.fifo
    assert sub.long_polling_timeout.seconds == 20
    assert sub.receive_batch_size == 32
    assert got.backoff_policy.max_attempts == 17
    assert [d.seconds for d in got.backoff_policy.customized_backoff.next] == [10, 30]


def test_a_consumers_max_attempts_are_its_groups_retry_max_times_plus_one() -> None:
    client = definition.Settings(client_type=2)
    client.subscription.group.name = "G"
    server = convert.ServerSettings(max_body_size=1, consume_backoff_ms=(10_000, 30_000))
    got = convert.settings_command(client, server, consume_attempts=3).settings
    assert got.backoff_policy.max_attempts == 3  # retryMaxTimes 2: two retries
    assert [d.seconds for d in got.backoff_policy.customized_backoff.next] == [10, 30]
