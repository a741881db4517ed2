"""What ACL 2.0 costs a broker: AuthDb.authorize per request (what the request guard asks
when authorizationEnabled=true), and loading a snapshot (each user or ACL change, each copy a
slave takes), for a few sizes of users x entries each.

    uv run --frozen --all-packages python bench/acl_check.py [--calls 100000]
"""

from __future__ import annotations

import argparse
import timeit

from ferry.protocol.messages import AclPolicyEntry, AclRecord, AuthSnapshot, AuthUser
from ferry.runtime.acl import Action, AuthDb, Resource

SIZES = ((10, 5), (100, 10), (1000, 20))  # users, entries per user


def snapshot(users: int, entries: int) -> AuthSnapshot:
    def entry(j: int) -> AclPolicyEntry:
        return AclPolicyEntry(
            resource=f"Topic:t{j}*",
            actions=["Pub", "Sub"],
            source_ips=["10.0.0.0/8"],
            decision="Allow",
        )

    return AuthSnapshot(
        version=1,
        users=[AuthUser(f"u{i}", "pw") for i in range(users)],
        acls=[AclRecord(f"User:u{i}", [entry(j) for j in range(entries)]) for i in range(users)],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100_000)
    calls: int = parser.parse_args().calls
    print("users x entries | load ms | authorize allowed us | refused us | Any us")
    for users, entries in SIZES:
        snap = snapshot(users, entries)
        load_s = timeit.timeit(lambda: AuthDb(snap), number=3) / 3  # noqa: B023
        db = AuthDb(snap)
        name = f"u{users // 2}"

        def per_call(resource: Resource, action: Action) -> float:
            check = lambda: db.authorize(name, resource, action, "10.1.2.3")  # noqa: E731,B023
            return timeit.timeit(check, number=calls) / calls * 1e6

        allowed = per_call(Resource.topic("t0-orders"), Action.PUB)
        refused = per_call(Resource.topic("zzz"), Action.PUB)
        any_one = per_call(Resource.topic("t0-orders"), Action.ANY)
        print(
            f"{users} x {entries} | {load_s * 1000:.0f} | {allowed:.1f} | {refused:.1f} | "
            f"{any_one:.1f}"
        )


if __name__ == "__main__":
    main()
