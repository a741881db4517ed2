"""Admin.pull (a range of a queue from a given offset, no consumer) and a caller-set msg id
(UNIQ_KEY) kept by the producer: the SDK parts the Spark connector stands on."""

from __future__ import annotations

import pytest
from itest_support import Cluster

from ferry.admin import Admin
from ferry.client import InvalidParameterError, Message, MessageQueue, Producer, PullStatus

pytestmark = pytest.mark.integration


def test_admin_pull_reads_a_queue_range_and_a_set_msg_id_is_kept(cluster: Cluster) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Ranges", 1, 1)
        with Producer("pg-ranges", cluster.namesrv) as producer:
            for i in range(10):
                producer.send(Message("Ranges", f"r{i}".encode()))
            fixed = producer.send(Message("Ranges", b"fixed", properties={"UNIQ_KEY": "AB" * 16}))
        assert fixed.msg_id == "AB" * 16
        queue = MessageQueue("Ranges", "broker-a", 0)

        got = admin.pull(queue, 3, 4)
        assert got.status == PullStatus.FOUND
        assert [m.body for m in got.messages] == [b"r3", b"r4", b"r5", b"r6"]
        assert (got.next_begin_offset, got.min_offset, got.max_offset) == (7, 0, 11)

        last = admin.pull(queue, 10, 5)
        assert [(m.body, m.msg_id) for m in last.messages] == [(b"fixed", "AB" * 16)]
        assert admin.pull(queue, 11).status == PullStatus.NO_NEW_MSG
        beyond = admin.pull(queue, 50)
        assert (beyond.status, beyond.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 11)
        with pytest.raises(InvalidParameterError):
            admin.pull(queue, -1)
