"""The message package: every struct sits in its role module's union and in the package's."""

from types import ModuleType
from typing import get_args

import pytest

from ferry.protocol import messages
from ferry.protocol.messages import (
    Reply,
    Request,
    admin,
    auth,
    client,
    common,
    ha,
    index,
    namesrv,
    reply_types,
    request_types,
    scheduler,
    store,
)

ROLES = [common, namesrv, client, store, index, scheduler, ha, admin, auth]


def subclasses(base: type) -> set[type]:
    found: set[type] = set()
    subs: list[type] = base.__subclasses__()
    for sub in subs:
        found |= {sub} | subclasses(sub)
    return found


def defined_in(module: ModuleType, base: type) -> set[type]:
    return {t for t in subclasses(base) if t.__module__ == module.__name__}


def union_of(module: ModuleType, kind: str) -> set[type]:
    alias = getattr(module, f"{module.__name__.rsplit('.', 1)[1].capitalize()}{kind}", None)
    return set(get_args(alias) or ([alias] if alias else []))


@pytest.mark.parametrize("module", ROLES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_each_role_union_holds_exactly_the_role_s_requests_and_replies(module: ModuleType) -> None:
    assert union_of(module, "Request") == defined_in(module, Request)
    assert union_of(module, "Reply") == defined_in(module, Reply)


def test_the_package_unions_hold_every_request_and_reply() -> None:
    assert set(request_types()) == subclasses(Request)
    assert set(reply_types()) == subclasses(Reply)
    assert len(request_types()) == len(subclasses(Request))  # no duplicates


def test_every_struct_is_importable_from_the_package() -> None:
    for t in subclasses(Request) | subclasses(Reply):
        assert getattr(messages, t.__name__) is t
