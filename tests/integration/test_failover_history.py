"""Failover as a history checker sees it (issue 38): a seeded schedule of faults (every kind of
history_support.KINDS once) under two producers and two consumer groups, default broker
settings, and bursts of sends caught by each pause of a master (SlowSends); then every
acknowledged message must reach both groups and the final log, no group may get a message
no replica kept, no (queue, offset) may hold two bodies, and no two masters may acknowledge
at once. The checker itself is tested first, on small hand-made histories.

FERRY_HISTORY_SEED=N picks another schedule; bench/failover_history.py runs long ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from history_check import FAILED, OK, TIMEOUT, Delivery, Entry, Fault, History, Sample, Send
from history_support import KINDS, run_history, schedule

SEED = int(os.environ.get("FERRY_HISTORY_SEED", "38"))

# ---- the checker, on hand-made histories --------------------------------------------------------

ADDRS = {"h:1": 1, "h:2": 2, "h:3": 3}


def clean() -> History:
    """Replica 1 master until a kill at t=5, replica 2 from t=6; two acks, each delivered to
    both groups and on both replicas' logs; one failed and one timed-out send."""
    h = History(seed=1, started=0.0, ended=10.0, addrs=dict(ADDRS), master=2)
    h.samples = [Sample(float(t), 1, 1, (1, 2)) for t in range(6)]
    h.samples.append(Sample(6.0, -1, 0))  # the controller did not answer
    h.samples += [Sample(float(t), 2, 2, (2, 3)) for t in range(7, 11)]
    h.faults = [Fault("kill-failover", "replica 1", 5.0, 7.0, 2.0, 1)]
    h.sends = [
        Send("p1", b"p1-0", 1.0, 1.1, OK, "", 0, 0, "h:1"),
        Send("p1", b"p1-1", 5.0, 8.0, TIMEOUT, "RequestTimeoutError"),
        Send("p2", b"p2-0", 8.0, 8.5, FAILED, "ServiceNotAvailableError"),
        Send("p2", b"p2-1", 8.5, 8.6, OK, "", 1, 0, "h:2"),
    ]
    for group, read_from in (("push", ""), ("slave-pull", "h:3")):
        h.deliveries += [
            Delivery(group, b"p1-0", 0, 0, 2.0, "h:1", read_from),
            Delivery(group, b"p2-1", 1, 0, 9.0, "h:2", read_from),
        ]
    h.deliveries.append(Delivery("push", b"p1-0", 0, 0, 9.5, "h:1"))  # again after failover
    h.logs = {r: [Entry(r, 0, 0, b"p1-0", "h:1"), Entry(r, 1, 0, b"p2-1", "h:2")] for r in (2, 3)}
    return h


def problems(h: History) -> str:
    return "\n".join(h.violations())


def test_a_clean_history_breaks_nothing_and_counts_its_figures() -> None:
    h = clean()
    assert h.violations() == []
    figures = h.figures()
    assert figures["sends"] == 4
    assert figures["acknowledged"] == 2
    assert figures["failed"] == {"ServiceNotAvailableError": 1}
    assert figures["timed out"] == 1
    assert figures["duplicates in push"] == 1  # counted, not a violation
    assert figures["duplicates in slave-pull"] == 0
    [(fault, took)] = h.failover_times()
    assert fault.kind == "kill-failover"
    assert took == pytest.approx(3.6)  # from 5.0 to p2-1's ack at 8.6
    h.assert_ok()
    print(h.report())


def test_an_acknowledged_message_a_group_never_got_is_lost() -> None:
    h = clean()
    h.deliveries = [d for d in h.deliveries if (d.group, d.body) != ("slave-pull", b"p2-1")]
    assert h.figures()["lost to slave-pull"] == 1
    assert h.figures()["lost to push"] == 0
    assert "lost to slave-pull: 1\n  b'p2-1' acked by replica 2 as q1:0" in problems(h)


def test_an_acknowledged_message_missing_from_the_final_log_is_lost() -> None:
    h = clean()
    h.logs[2] = h.logs[2][1:]  # the master lacks p1-0; replica 3 still holds it
    assert h.figures()["acked, not in the final log"] == 1
    assert "b'p1-0' acked by replica 1 as q0:0" in problems(h)
    assert "logged: replica 3 q0:0" in problems(h)
    with pytest.raises(AssertionError, match="not in the final log"):
        h.assert_ok()


def test_a_delivery_no_replica_kept_is_a_phantom() -> None:
    h = clean()
    h.deliveries.append(Delivery("slave-pull", b"p1-1", 0, 1, 9.0, "h:1", "h:3"))
    assert h.figures()["phantom in slave-pull"] == 1
    assert h.figures()["phantom in push"] == 0
    assert "b'p1-1' as q0:1 stored by replica 1 read from replica 3" in problems(h)


def test_two_bodies_at_one_queue_offset_are_a_conflict() -> None:
    h = clean()
    # the old master's late record: on its own log and served by its slave reads
    h.logs[1] = [Entry(1, 0, 0, b"p1-0", "h:1"), Entry(1, 1, 0, b"p1-1", "h:1")]
    h.deliveries.append(Delivery("slave-pull", b"p1-1", 1, 0, 9.0, "h:1", "h:1"))
    assert h.figures()["offset conflicts"] == 1
    assert h.figures()["phantom in slave-pull"] == 0  # replica 1's log holds it
    text = problems(h)
    assert "q1:0: b'p1-1' [log of replica 1, slave-pull from replica 1]" in text
    assert "b'p2-1' [ack by replica 2, log of replica 2, log of replica 3, push" in text


def test_an_old_masters_ack_after_the_new_masters_first_is_a_double_master() -> None:
    h = clean()
    # begun at 8.7, after replica 2's first ack (8.6): replica 1 answered as a second master
    h.sends.append(Send("p1", b"p1-2", 8.7, 8.8, OK, "", 0, 1, "h:1"))
    for r in (2, 3):
        h.logs[r].append(Entry(r, 0, 1, b"p1-2", "h:1"))
    h.deliveries += [Delivery(g, b"p1-2", 0, 1, 9.0, "h:1") for g in ("push", "slave-pull")]
    assert h.figures()["double-master violations"] == 1
    assert "b'p1-2' acked by replica 1 as q0:1 at t=8.80s" in problems(h)
    assert "after replica 2 (epoch 2) acked b'p2-1' at t=8.60s" in problems(h)


def test_an_old_masters_ack_of_a_send_begun_before_the_new_masters_first_is_not() -> None:
    h = clean()
    # begun at 4.9 (before the kill), answered late: no proof of two masters at once
    h.sends.append(Send("p1", b"p1-2", 4.9, 8.8, OK, "", 0, 1, "h:1"))
    for r in (2, 3):
        h.logs[r].append(Entry(r, 0, 1, b"p1-2", "h:1"))
    h.deliveries += [Delivery(g, b"p1-2", 0, 1, 9.0, "h:1") for g in ("push", "slave-pull")]
    assert h.violations() == []


def test_an_ack_from_a_replica_never_named_master_is_a_double_master() -> None:
    h = clean()
    h.sends.append(Send("p1", b"p1-2", 8.7, 8.8, OK, "", 0, 1, "h:3"))
    for r in (2, 3):
        h.logs[r].append(Entry(r, 0, 1, b"p1-2", "h:3"))
    h.deliveries += [Delivery(g, b"p1-2", 0, 1, 9.0, "h:3") for g in ("push", "slave-pull")]
    assert "b'p1-2' acked by replica 3 as q0:1" in problems(h)
    assert "the controller had not named it master" in problems(h)


def test_the_schedule_depends_on_the_seed_alone_and_has_every_kind() -> None:
    assert schedule(SEED, 20) == schedule(SEED, 20)
    assert schedule(SEED, 20) != schedule(SEED + 1, 20)
    assert schedule(SEED, 20)[: len(KINDS)] == schedule(SEED, len(KINDS))  # the bench's prefix
    assert sorted(s.kind for s in schedule(SEED, len(KINDS))) == sorted(KINDS)


# ---- a cluster through every kind of fault ------------------------------------------------------


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_a_seeded_schedule_of_faults_breaks_no_invariant(tmp_path: Path) -> None:
    """Default settings (allAckInSyncStateSet=false, no NO_LOSS): the figures table is
    printed, and a failure quotes each offending message."""
    steps = schedule(SEED, len(KINDS))
    print(f"FERRY_HISTORY_SEED={SEED}: {', '.join(s.kind for s in steps)}")
    history = run_history(tmp_path, SEED, len(steps))
    print(history.report())
    history.assert_ok()
