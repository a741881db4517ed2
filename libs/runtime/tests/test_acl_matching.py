"""AuthDb.authorize: who may do what to which resource from where (ACL 2.0's rules)."""

from __future__ import annotations

import threading

import pytest

from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import AclPolicyEntry, AclRecord, AuthSnapshot, AuthUser
from ferry.runtime.acl import Action, AuthDb, Resource

PUB, SUB = Action.PUB, Action.SUB
ORDERS = Resource.topic("orders")
HERE = "127.0.0.1"


def entry(resource: str, actions: str, decision: str = "Allow", ips: str = "") -> AclPolicyEntry:
    return AclPolicyEntry(
        resource=resource,
        actions=actions.split(","),
        source_ips=[ip for ip in ips.split(",") if ip],
        decision=decision,
    )


def db(*entries: AclPolicyEntry, user_type: str = "Normal", status: str = "enable") -> AuthDb:
    return AuthDb(
        AuthSnapshot(
            version=1,
            users=[AuthUser("alice", "secret", user_type, status)],
            acls=[AclRecord("User:alice", list(entries))] if entries else [],
        )
    )


def test_literal_resource_allows_only_that_name_and_that_action() -> None:
    acl = db(entry("Topic:orders", "Pub"))
    assert acl.authorize("alice", ORDERS, PUB, HERE) is None
    assert acl.authorize("alice", Resource.topic("orders2"), PUB, HERE) == (
        "user alice may not Pub on Topic:orders2 (no policy allows it)"
    )
    assert acl.authorize("alice", ORDERS, SUB, HERE) == (
        "user alice may not Sub on Topic:orders (no policy allows it)"
    )
    # a group of the same name is another resource
    assert acl.authorize("alice", Resource.group("orders"), PUB, HERE) is not None


def test_prefix_and_any_patterns() -> None:
    acl = db(entry("Topic:ord*", "Pub"), entry("Group:*", "Sub"), entry("Cluster", "Get"))
    assert acl.authorize("alice", Resource.topic("ord"), PUB, HERE) is None
    assert acl.authorize("alice", Resource.topic("orders-eu"), PUB, HERE) is None
    assert acl.authorize("alice", Resource.topic("or"), PUB, HERE) is not None
    assert acl.authorize("alice", Resource.group("anything"), SUB, HERE) is None
    assert acl.authorize("alice", Resource.cluster("DefaultCluster"), Action.GET, HERE) is None
    anything = db(entry("*", "Pub"))
    for resource in (ORDERS, Resource.group("g"), Resource.cluster("c")):
        assert anything.authorize("alice", resource, PUB, HERE) is None
        assert anything.authorize("alice", resource, SUB, HERE) is not None


def test_deny_wins_over_allow_even_a_narrower_allow() -> None:
    acl = db(entry("Topic:pay*", "Pub", "Deny"), entry("Topic:payments", "Pub,Sub"))
    assert acl.authorize("alice", Resource.topic("payments"), PUB, HERE) == (
        "user alice may not Pub on Topic:payments (denied by Topic:pay*)"
    )
    assert acl.authorize("alice", Resource.topic("payments"), SUB, HERE) is None


def test_all_covers_every_action_in_allow_and_in_deny() -> None:
    acl = db(entry("Topic:orders", "All"))
    for action in Action:
        assert acl.authorize("alice", ORDERS, action, HERE) is None, action
    denied = db(entry("Topic:*", "All"), entry("Topic:orders", "All", "Deny"))
    assert denied.authorize("alice", ORDERS, Action.DELETE, HERE) is not None
    assert denied.authorize("alice", Resource.topic("other"), Action.DELETE, HERE) is None


def test_any_is_allowed_by_one_action_that_is_not_denied() -> None:
    acl = db(entry("Topic:orders", "Pub,Sub"), entry("Topic:orders", "Pub", "Deny"))
    # the two entries of one resource: the later one replaces the first (one per resource)
    assert acl.authorize("alice", ORDERS, Action.ANY, HERE) == (
        "user alice may not Any on Topic:orders (denied by Topic:orders)"
    )
    acl = db(entry("Topic:orders", "Pub,Sub"), entry("Topic:ord*", "Pub", "Deny"))
    assert acl.authorize("alice", ORDERS, Action.ANY, HERE) is None  # Sub is left
    assert db().authorize("alice", ORDERS, Action.ANY, HERE) is not None


def test_source_ips_as_cidrs_and_addresses() -> None:
    acl = db(entry("Topic:orders", "Pub", ips="10.0.0.0/8,192.168.1.7,fd00::/8"))
    assert acl.authorize("alice", ORDERS, PUB, "10.20.30.40") is None
    assert acl.authorize("alice", ORDERS, PUB, "192.168.1.7") is None
    assert acl.authorize("alice", ORDERS, PUB, "fd00::1") is None
    assert acl.authorize("alice", ORDERS, PUB, "::ffff:10.1.1.1") is None  # IPv4 as IPv6
    assert acl.authorize("alice", ORDERS, PUB, "192.168.1.8") == (
        "user alice may not Pub on Topic:orders (no policy allows it from 192.168.1.8)"
    )
    assert acl.authorize("alice", ORDERS, PUB, "not an address") is not None
    # a Deny limited to some addresses denies only from them
    acl = db(entry("Topic:*", "Pub"), entry("Topic:orders", "Pub", "Deny", "10.0.0.0/8"))
    assert acl.authorize("alice", ORDERS, PUB, "10.0.0.1") is not None
    assert acl.authorize("alice", ORDERS, PUB, "127.0.0.1") is None


def test_disabled_unknown_and_super_users() -> None:
    assert db(entry("*", "All"), status="disable").authorize("alice", ORDERS, PUB, HERE) == (
        "user alice is disabled"
    )
    assert db(entry("*", "All")).authorize("bob", ORDERS, PUB, HERE) == "user bob does not exist"
    # a Super user needs no ACL, and even a Deny does not bind it
    root = db(entry("*", "All", "Deny"), user_type="Super")
    assert root.authorize("alice", ORDERS, Action.DELETE, HERE) is None
    assert db(user_type="Super", status="disable").authorize("alice", ORDERS, PUB, HERE)
    assert db().authorize("alice", ORDERS, PUB, HERE) == (
        "user alice may not Pub on Topic:orders (no policy allows it)"
    )


def test_group_retry_and_dead_letter_topics_are_the_group() -> None:
    acl = db(entry("Group:g", "Sub"))
    assert Resource.group("%RETRY%g") == Resource.group("g")
    assert acl.authorize("alice", Resource.group("%DLQ%g"), SUB, HERE) is None


def test_names_are_spelled_canonically_whatever_their_case() -> None:
    acl = db(entry("topic:Orders", "pub", "allow"))
    assert acl.snapshot().acls[0].entries[0] == AclPolicyEntry(
        resource="Topic:Orders", actions=["Pub"], decision="Allow"
    )
    assert acl.authorize("alice", Resource.topic("Orders"), PUB, HERE) is None
    assert acl.authorize("alice", Resource.topic("orders"), PUB, HERE) is not None


@pytest.mark.parametrize(
    "bad",
    [
        entry("Queue:x", "Pub"),  # unknown resource type
        entry("Topic", "Pub"),  # a topic needs a name
        entry("Topic:", "Pub"),
        entry("Topic:a*b", "Pub"),  # '*' only at the end
        entry("Topic:a b", "Pub"),
        entry("Topic:a", "Publish"),  # unknown action
        entry("Topic:a", "Any"),  # Any is asked, never granted
        entry("Topic:a", ""),
        entry("Topic:a", "Pub", "Maybe"),  # unknown decision
        entry("Topic:a", "Pub", ips="10.0.0.0/33"),  # malformed CIDR
        entry("Topic:a", "Pub", ips="ten.0.0.1"),
    ],
)
def test_a_bad_snapshot_is_refused_whole(bad: AclPolicyEntry) -> None:
    acl = db(entry("Topic:orders", "Pub"))
    with pytest.raises(InvalidParameterError):
        acl.load(
            AuthSnapshot(
                version=2,
                users=[AuthUser("alice", "s")],
                acls=[AclRecord("User:alice", [entry("Topic:b", "Sub"), bad])],
            )
        )
    assert acl.version == 1
    assert acl.authorize("alice", ORDERS, PUB, HERE) is None


def test_reads_see_one_snapshot_or_the_next_while_another_thread_loads() -> None:
    allow = AuthSnapshot(
        version=1,
        users=[AuthUser("alice", "s")],
        acls=[AclRecord("User:alice", [entry("Topic:orders", "Pub")])],
    )
    deny = AuthSnapshot(version=2, users=[AuthUser("alice", "s")])
    acl = AuthDb(allow)
    answers: set[str | None] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            answers.add(acl.authorize("alice", ORDERS, PUB, HERE))

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(200):
        acl.load(allow if i % 2 else deny)
    stop.set()
    reader.join()
    assert answers <= {None, "user alice may not Pub on Topic:orders (no policy allows it)"}
