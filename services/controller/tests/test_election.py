"""The election rule and the states it writes (pure: no etcd)."""

from __future__ import annotations

from ferry.controller.config import ControllerConfig
from ferry.controller.election import (
    Candidate,
    Choice,
    choose_master,
    elected_state,
    sync_state_set_problem,
    with_sync_state_set,
)
from ferry.controller.model import ReplicaDoc, StateDoc


def alive(*cands: Candidate) -> dict[int, Candidate]:
    return {c.replica_id: c for c in cands}


def test_an_in_sync_replica_wins_over_an_out_of_sync_one_with_more_data() -> None:
    live = alive(Candidate(2, 0, 100), Candidate(3, 0, 900))
    assert choose_master(live, [1, 2], unclean=False) == Choice(2, True)


def test_an_out_of_sync_replica_never_wins_without_unclean_election() -> None:
    live = alive(Candidate(3, 0, 900))
    assert choose_master(live, [1, 2], unclean=False) is None


def test_unclean_election_takes_the_live_replica_with_the_largest_max_offset() -> None:
    live = alive(Candidate(3, 0, 900), Candidate(4, -5, 800), Candidate(5, 0, 900))
    assert choose_master(live, [1, 2], unclean=True) == Choice(3, False)


def test_unclean_election_still_prefers_a_live_in_sync_replica() -> None:
    live = alive(Candidate(2, 0, 10), Candidate(3, 0, 900))
    assert choose_master(live, [1, 2], unclean=True) == Choice(2, True)


def test_newest_epoch_then_max_offset_then_priority_then_lowest_id() -> None:
    """RocketMQ 5's order: data before priority, or a send one slave acknowledged is lost."""
    isr = [1, 2, 3, 4]
    # the replica that knows the newest epoch wins whatever its offset or priority
    assert choose_master(
        alive(Candidate(1, 0, 999, epoch=3), Candidate(2, 0, 10, epoch=4)), isr, unclean=False
    ) == Choice(2, True)
    # same epoch: the largest max offset wins over a better priority
    assert choose_master(
        alive(Candidate(1, 5, 999), Candidate(2, 1, 10)), isr, unclean=False
    ) == Choice(1, True)
    # same epoch and offset: the lowest brokerElectionPriority number
    assert choose_master(
        alive(Candidate(1, 5, 20), Candidate(2, 1, 20)), isr, unclean=False
    ) == Choice(2, True)
    # same epoch, offset and priority: the lowest id
    assert choose_master(
        alive(Candidate(4, 0, 20), Candidate(3, 0, 20)), isr, unclean=False
    ) == Choice(3, True)


def test_a_first_election_takes_any_live_replica() -> None:
    live = alive(Candidate(2, 0, 0), Candidate(3, 0, 50))
    assert choose_master(live, [], unclean=False, first=True) == Choice(3, True)
    assert choose_master({}, [], unclean=False, first=True) is None


def test_the_preferred_replica_wins_when_it_is_a_candidate() -> None:
    live = alive(Candidate(2, 0, 100), Candidate(3, 0, 50))
    assert choose_master(live, [2, 3], unclean=False, preferred=3) == Choice(3, True)
    # not in sync: the rule decides
    assert choose_master(live, [2], unclean=False, preferred=3) == Choice(2, True)


def test_an_election_raises_the_epoch_and_records_where_it_starts() -> None:
    old = StateDoc(
        master_id=1,
        epoch=3,
        sync_state_set=[1, 2],
        sync_state_set_epoch=7,
        epochs=[(1, 0), (3, 500)],
        handover_to=2,
    )
    new = elected_state(old, Candidate(2, 0, 900), ReplicaDoc(addr="h:2", ha_addr="h:3"))
    assert (new.master_id, new.master_addr, new.master_ha_addr) == (2, "h:2", "h:3")
    assert new.epoch == 4
    assert new.sync_state_set == [2]
    assert new.sync_state_set_epoch == 8
    assert new.epochs == [(1, 0), (3, 500), (4, 900)]
    assert new.handover_to == 0


def test_an_epoch_never_repeats_one_a_replica_already_knows() -> None:
    # the group's state was cleaned, but a replica's epoch file says 6
    new = elected_state(None, Candidate(1, 0, 0, epoch=6), ReplicaDoc(addr="h:1"), known_epoch=4)
    assert new.epoch == 7
    assert new.epochs == [(7, 0)]


def test_the_master_s_in_sync_set_must_hold_it_and_only_registered_replicas() -> None:
    state = StateDoc(master_id=1, epoch=2, sync_state_set=[1])
    assert sync_state_set_problem(state, 1, [1, 2], [1, 2, 3]) is None
    assert "leaves out the master" in str(sync_state_set_problem(state, 1, [2], [1, 2]))
    assert "never registered" in str(sync_state_set_problem(state, 1, [1, 9], [1, 2]))
    assert "not the master" in str(sync_state_set_problem(state, 2, [1, 2], [1, 2]))


def test_a_changed_in_sync_set_bumps_its_epoch_and_an_unchanged_one_writes_nothing() -> None:
    state = StateDoc(master_id=1, epoch=2, sync_state_set=[1], sync_state_set_epoch=3)
    changed = with_sync_state_set(state, [2, 1])
    assert changed is not None
    assert (changed.sync_state_set, changed.sync_state_set_epoch, changed.epoch) == ([1, 2], 4, 2)
    assert with_sync_state_set(changed, [1, 2]) is None


def test_the_master_s_write_lease_ends_well_before_its_etcd_lease() -> None:
    for timeout in (2000, 3000, 10_000, 30_000):
        cfg = ControllerConfig(controller_heart_beat_timeout_mills=timeout)
        assert cfg.lease_ttl_s * 1000 >= timeout
        assert 0 < cfg.heartbeat_lease_ms <= timeout - 500
