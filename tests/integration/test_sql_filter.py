"""SQL92 filters (MessageSelector.by_sql) end to end on real processes: refused while the broker
has enablePropertyFilter=false, refused with its position when it does not parse, and once
switched on, consumers get exactly the matching messages, filtered by the broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from consume_support import Received, create_topic
from itest_support import Cluster, wait_for

from ferry.admin import Admin
from ferry.client import (
    BrokerSystemError,
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    MessageSelector,
    Producer,
    PullConsumer,
    PushConsumer,
    SqlFilterError,
    SubscriptionParseError,
)
from ferry.protocol.codes import PullStatus
from ferry.protocol.messages import SubscriptionData

pytestmark = pytest.mark.integration

FIRST = ConsumeFromWhere.FIRST_OFFSET
FILTER = "amount > 100 AND (region = 'eu' OR region IS NULL) AND TAGS <> 'skip'"


def messages() -> list[Message]:
    """60 messages; which ones FILTER selects is computed here the same way by hand."""
    out = []
    for i in range(60):
        props = {"amount": str(i * 5)}  # 0 .. 295
        if i % 3 == 0:
            props["region"] = "eu"
        elif i % 3 == 1:
            props["region"] = "us"
        # i % 3 == 2: no region at all
        if i % 7 == 0:
            del props["amount"]  # NULL: never > 100, and NOT would not help either
        tags = "skip" if i % 11 == 0 else "keep"
        out.append(Message("Orders", f"o{i}".encode(), tags=tags, properties=props))
    return out


def expected() -> set[bytes]:
    return {
        f"o{i}".encode()
        for i in range(60)
        if i % 7 != 0 and i * 5 > 100 and i % 3 != 1 and i % 11 != 0
    }


def test_sql_filters_refused_while_off_then_filtered_by_the_broker(
    cluster_factory: Callable[..., Cluster],
) -> None:
    # retries wait for delay level 3 + reconsume times: short levels keep the test fast
    cluster = cluster_factory(messageDelayLevel="1s 1s 1s 1s 1s")
    create_topic(cluster.namesrv, "Orders", 2)
    with Producer("pg-sql", cluster.namesrv) as producer:
        for msg in messages():
            producer.send(msg)

    # enablePropertyFilter=false (the default): refused at start, as RocketMQ words it
    off = PushConsumer("g-sql-off", cluster.namesrv, consume_from=FIRST)
    off.subscribe("Orders", MessageSelector.by_sql("amount > 100"))
    off.register_listener(lambda msgs: ConsumeResult.SUCCESS)
    with pytest.raises(
        BrokerSystemError, match="does not support consumer to filter message by SQL92"
    ):
        off.start()
    with Admin(cluster.namesrv) as admin:
        queue = admin.queues("Orders")[0]
        with pytest.raises(BrokerSystemError, match="enablePropertyFilter=false"):
            admin.pull(queue, 0, 8, expression=MessageSelector.by_sql("amount > 100"))
        admin.update_broker_config({"enablePropertyFilter": "true"}, cluster="DefaultCluster")

    # a bad filter: refused by the SDK at once, with its position ...
    with pytest.raises(SqlFilterError) as local:
        MessageSelector.by_sql("amount > > 100")
    assert (local.value.line, local.value.column) == (1, 10)
    # ... and by the broker when it gets there anyway (a selector built by hand)
    bad = PullConsumer("g-sql-bad", cluster.namesrv, consume_from=FIRST)
    bad.subscribe("Orders", MessageSelector("SQL92", "amount >\n  'x'"))
    with pytest.raises(SubscriptionParseError, match="line 2, column 3"):
        bad.start()

    # a push consumer gets exactly the matching messages; one failed delivery comes back
    # through %RETRY%g-sql, which is not filtered again (RocketMQ's filterSupportRetry=false)
    received = Received()
    failed_once: set[bytes] = set()

    def verdict(msg: MessageExt) -> ConsumeResult:
        if msg.body == b"o27" and msg.body not in failed_once:
            failed_once.add(msg.body)
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    push = PushConsumer("g-sql", cluster.namesrv, consume_from=FIRST, pull_batch_size=8)
    push.subscribe("Orders", MessageSelector.by_sql(FILTER))
    push.register_listener(received.listener(verdict=verdict))
    with push:
        wait_for(lambda: set(received.bodies()) == expected(), 20, "the matching messages")
        with Admin(cluster.namesrv) as admin:  # the broker holds the subscription as SQL92
            (reply,) = admin.consumer_connections("g-sql").values()
            assert SubscriptionData("Orders", FILTER, "SQL92") in reply.subscriptions
        wait_for(lambda: received.bodies().count(b"o27") == 2, 20, "o27 again, from its retry")
    assert b"o27" in expected()
    assert set(received.bodies()) == expected()

    # a pull consumer, another filter on the same queues
    pull = PullConsumer("g-sql-pull", cluster.namesrv, consume_from=FIRST)
    pull.subscribe("Orders", MessageSelector.by_sql("region IN ('us') AND amount BETWEEN 0 AND 50"))
    got: list[bytes] = []
    with pull:
        wait_for(lambda: got.extend(m.body for m in pull.poll(0.5)) or len(got) >= 3, 20, "us")
        got.extend(m.body for m in pull.poll(0.5))
    assert sorted(got) == sorted(f"o{i}".encode() for i in (1, 4, 10))  # o7 has no amount

    # assigned queues read with RocketMQ's setSubExpressionForAssign: SQL92, then tags
    assigned = PullConsumer("g-sql-assign", cluster.namesrv, consume_from=FIRST)
    assigned.set_sub_expression_for_assign("Orders", MessageSelector.by_sql(FILTER))
    with Admin(cluster.namesrv) as admin:
        orders = admin.queues("Orders")
    assigned.assign(orders)
    got = []
    with assigned:
        wait_for(
            lambda: got.extend(m.body for m in assigned.poll(0.5)) or len(got) >= len(expected()),
            20,
            "the assigned queues' matching messages",
        )
        got.extend(m.body for m in assigned.poll(0.5))
    assert sorted(got) == sorted(expected())
    tagged = PullConsumer("g-tag-assign", cluster.namesrv, consume_from=FIRST)
    tagged.assign(orders)
    tagged.set_sub_expression_for_assign("Orders", "skip")  # after assign: applies at once
    skipped = sorted(f"o{i}".encode() for i in range(60) if i % 11 == 0)
    got = []
    with tagged:
        wait_for(
            lambda: got.extend(m.body for m in tagged.poll(0.5)) or len(got) >= len(skipped),
            20,
            "the assigned queues' messages tagged skip",
        )
        got.extend(m.body for m in tagged.poll(0.5))
    assert sorted(got) == skipped

    # Admin.pull (what Spark uses): skipped offsets move on, NO_MATCHED_MSG when none left
    with Admin(cluster.namesrv) as admin:
        seen: list[bytes] = []
        for queue in admin.queues("Orders"):
            offset = 0
            while True:
                result = admin.pull(queue, offset, 4, expression=MessageSelector.by_sql(FILTER))
                if result.status == PullStatus.NO_NEW_MSG:
                    break
                assert result.status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG)
                seen.extend(m.body for m in result.messages)
                offset = result.next_begin_offset
        assert set(seen) == expected() and len(seen) == len(expected())
