"""Queue selection of the producer: round robin, broker avoidance, orderly keys, TBW102."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

from ferry.client.message import MessageQueue
from ferry.client.publish import fallback_route, orderly_index, select_round_robin
from ferry.client.route import TopicRoute
from ferry.protocol.messages import BrokerData, QueueData, TopicRouteData

QUEUES = (
    MessageQueue("t", "a", 0),
    MessageQueue("t", "a", 1),
    MessageQueue("t", "b", 0),
    MessageQueue("t", "b", 1),
)


def test_round_robin_visits_every_queue_in_turn() -> None:
    picked = [select_round_robin(QUEUES, i, None) for i in range(8)]
    assert picked == [*QUEUES, *QUEUES]


def test_retry_avoids_the_broker_that_failed() -> None:
    for start in range(4):
        assert select_round_robin(QUEUES, start, "a").broker_name == "b"


def test_retry_uses_the_failed_broker_when_it_is_the_only_one() -> None:
    only_a = QUEUES[:2]
    assert select_round_robin(only_a, 1, "a") == only_a[1]


def test_orderly_index_is_crc32_of_the_key_modulo_queue_count() -> None:
    assert orderly_index("order-42", 8) == zlib.crc32(b"order-42") % 8
    assert orderly_index(b"order-42", 8) == orderly_index("order-42", 8)
    assert {orderly_index("order-42", 8) for _ in range(100)} == {orderly_index("order-42", 8)}


def test_orderly_index_is_the_same_in_another_process() -> None:
    keys = [f"customer-{i}" for i in range(50)]
    code = (
        "import sys; from ferry.client.publish import orderly_index; "
        "print(','.join(str(orderly_index(k, 7)) for k in sys.argv[1:]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, *keys], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ",".join(str(orderly_index(k, 7)) for k in keys)


def test_unknown_topic_borrows_tbw102_route_with_default_queue_count() -> None:
    default = TopicRoute.from_data(
        "TBW102",
        TopicRouteData(
            queue_datas=[QueueData("a", 8, 8, 7), QueueData("b", 2, 2, 6)],
            broker_datas=[BrokerData("c", "a", {0: "h1:1"}), BrokerData("c", "b", {0: "h2:1"})],
        ),
    )
    route = fallback_route("new-topic", default, 4)
    assert [str(q) for q in route.write_queues] == [
        "new-topic@a#0",
        "new-topic@a#1",
        "new-topic@a#2",
        "new-topic@a#3",
        "new-topic@b#0",
        "new-topic@b#1",
    ]
    assert route.master_of("b") == "h2:1"
