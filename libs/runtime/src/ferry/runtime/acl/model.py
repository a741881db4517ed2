"""ACL 2.0's vocabulary: actions, resources as requests name them, and the parsed forms of
what policies say (resource patterns, source address ranges, decisions, user kinds).

Every parse_* function raises InvalidParameterError naming what is wrong, so a bad admin
request is refused whole and changes nothing. Names are matched case-insensitively and kept
as RocketMQ spells them (`Pub`, `Topic`, `Allow`, `Super`, `enable`).
"""

from __future__ import annotations

import enum
import functools
import ipaddress
from dataclasses import dataclass

from ferry.protocol.errors import InvalidParameterError

SUPER = "Super"
NORMAL = "Normal"
USER_TYPES = (SUPER, NORMAL)
ENABLE = "enable"
DISABLE = "disable"
USER_STATUSES = (ENABLE, DISABLE)
ALLOW = "Allow"
DENY = "Deny"
DECISIONS = (ALLOW, DENY)
RESOURCE_KINDS = ("Cluster", "Topic", "Group")
USER_PREFIX = "User:"
ANY_NAME = "*"
# a group's retry and dead-letter topics are the group's own (RocketMQ's Resource.ofGroup)
GROUP_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%")
MAX_NAME = 255


class Action(enum.Enum):
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"
    ALL = "All"  # in a policy: every action
    ANY = "Any"  # asked by a request: any one action on the resource will do


CONCRETE_ACTIONS = tuple(a for a in Action if a not in (Action.ALL, Action.ANY))


@dataclass(frozen=True)
class Resource:
    """What a request touches: kind "Cluster" | "Topic" | "Group", and its name."""

    kind: str
    name: str

    @classmethod
    def topic(cls, name: str) -> Resource:
        return cls("Topic", name)

    @classmethod
    def group(cls, name: str) -> Resource:
        for prefix in GROUP_TOPIC_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
        return cls("Group", name)

    @classmethod
    def cluster(cls, name: str) -> Resource:
        return cls("Cluster", name)

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True)
class Pattern:
    """A policy's resource: kind "" matches every kind; name "" every name of the kind;
    prefix: names starting with `name`. `text` is how mqadmin spells it."""

    kind: str
    name: str
    prefix: bool
    text: str

    def matches(self, resource: Resource) -> bool:
        if not self.kind:
            return True
        if self.kind != resource.kind:
            return False
        if not self.name:
            return True
        if self.prefix:
            return resource.name.startswith(self.name)
        return resource.name == self.name


def _canonical(value: str, allowed: tuple[str, ...], what: str) -> str:
    for name in allowed:
        if value.strip().lower() == name.lower():
            return name
    raise InvalidParameterError(f"{what} {value!r} is not one of {', '.join(allowed)}")


def user_type(value: str) -> str:
    return _canonical(value, USER_TYPES, "user type")


def user_status(value: str) -> str:
    return _canonical(value, USER_STATUSES, "user status")


def decision(value: str) -> str:
    return _canonical(value, DECISIONS, "decision")


def check_username(name: str) -> str:
    if not name or not name.strip():
        raise InvalidParameterError("a username cannot be empty")
    if name != name.strip() or any(c.isspace() or c in ",:" for c in name):
        raise InvalidParameterError(
            f"username {name!r} holds a space, comma or colon (subjects are User:NAME)"
        )
    if len(name) > MAX_NAME:
        raise InvalidParameterError(f"a username is at most {MAX_NAME} characters")
    return name


def subject_user(subject: str) -> str:
    """'User:alice' -> 'alice' (subjects are users in ACL 2.0)."""
    kind, sep, name = subject.partition(":")
    if not sep or kind.strip().lower() != "user":
        raise InvalidParameterError(f"subject {subject!r} is not User:NAME")
    return check_username(name)


_ACTIONS = {a.value.lower(): a for a in Action}


def parse_action(value: str, *, in_policy: bool = True) -> Action:
    action = _ACTIONS.get(value.strip().lower())
    if action is None or (in_policy and action is Action.ANY):
        if action is Action.ANY:
            raise InvalidParameterError("a policy cannot name the action Any (use All)")
        names = ", ".join(a.value for a in Action if not (in_policy and a is Action.ANY))
        raise InvalidParameterError(f"action {value!r} is not one of {names}")
    return action


def parse_actions(values: list[str]) -> list[Action]:
    actions: list[Action] = []
    for value in values:
        action = parse_action(value)
        if action not in actions:
            actions.append(action)
    if not actions:
        raise InvalidParameterError("a policy entry needs at least one action")
    return actions


@functools.lru_cache(maxsize=4096)  # policies repeat their resources; a Pattern is immutable
def parse_pattern(text: str) -> Pattern:
    """'Topic:orders', 'Topic:ord*', 'Topic:*', 'Group:g', 'Cluster:name', 'Cluster', '*'."""
    raw = text.strip()
    if raw == ANY_NAME:
        return Pattern("", "", False, ANY_NAME)
    kind_text, sep, name = raw.partition(":")
    kind = _canonical(kind_text, RESOURCE_KINDS, "resource type") if kind_text else ""
    if not kind:
        raise InvalidParameterError(f"resource {text!r} is not Type:NAME (or *)")
    if not sep:
        if kind != "Cluster":
            raise InvalidParameterError(f"resource {text!r} needs a name: {kind}:NAME")
        name = ANY_NAME
    if not name or any(c.isspace() or c == "," for c in name) or len(name) > MAX_NAME:
        raise InvalidParameterError(f"resource {text!r} has no valid name")
    if name == ANY_NAME:
        return Pattern(kind, "", False, f"{kind}:{ANY_NAME}")
    stem = name[:-1] if name.endswith(ANY_NAME) else name
    if ANY_NAME in stem:
        raise InvalidParameterError(f"resource {text!r}: '*' is allowed only at the end")
    return Pattern(kind, stem, name.endswith(ANY_NAME), f"{kind}:{name}")


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=4096)  # parsing a network costs ~20 us; they are immutable
def parse_source_ip(text: str) -> Network:
    """An address or a CIDR (host bits set are accepted: 10.1.2.3/8 is 10.0.0.0/8)."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise InvalidParameterError(f"source ip {text!r} is not an address or CIDR") from None


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=4096)  # the same clients ask again and again
def parse_address(text: str) -> tuple[Address, ...]:
    """A caller's address, and the IPv4 address an IPv4-mapped IPv6 one stands for; () when
    it does not parse (it is then in no range)."""
    try:
        addr = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return ()
    mapped = addr.ipv4_mapped if isinstance(addr, ipaddress.IPv6Address) else None
    return (addr, mapped) if mapped is not None else (addr,)


def ip_in(addrs: tuple[Address, ...], networks: tuple[Network, ...]) -> bool:
    """No networks: from anywhere."""
    return not networks or any(a in net for net in networks for a in addrs)
