"""What the controller keeps in etcd for a broker group, as JSON documents, and a group read
at one etcd revision.

Keys, under /ferry/<brokerClusterName>/<brokerName>/:
- replicas/<replicaId>: ReplicaDoc, written on register, deleted by cleanBrokerMetadata;
- alive/<replicaId>: AliveDoc on an etcd lease the replica's heartbeats refresh (gone: dead);
- state: StateDoc, changed only by a transaction comparing its mod_revision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

PREFIX = "/ferry/"
CONTROLLERS_PREFIX = "/ferry-controllers/"
MAX_NAME = 255


class ReplicaDoc(msgspec.Struct, rename="camel", kw_only=True):
    addr: str
    ha_addr: str = ""
    priority: int = 0  # brokerElectionPriority: the lowest number wins
    registered_ms: int = 0


class AliveDoc(msgspec.Struct, rename="camel", kw_only=True):
    max_offset: int = 0
    epoch: int = 0
    role: str = ""


class StateDoc(msgspec.Struct, rename="camel", kw_only=True):
    master_id: int = 0  # 0: none
    master_addr: str = ""
    master_ha_addr: str = ""
    epoch: int = 0
    sync_state_set: list[int] = []
    sync_state_set_epoch: int = 0
    epochs: list[tuple[int, int]] = []  # (epoch, start offset)
    handover_to: int = 0  # electMaster's target while the old master's lease runs out


@dataclass
class Alive:
    doc: AliveDoc
    lease: int  # the etcd lease id the key is attached to


@dataclass
class Group:
    """A broker group as read from etcd; state_rev is the state key's mod_revision (0: none)."""

    cluster: str
    broker_name: str
    replicas: dict[int, ReplicaDoc] = field(default_factory=dict)
    alive: dict[int, Alive] = field(default_factory=dict)
    state: StateDoc | None = None
    state_rev: int = 0

    @property
    def prefix(self) -> str:
        return group_prefix(self.cluster, self.broker_name)

    @property
    def master_alive(self) -> bool:
        return self.state is not None and self.state.master_id in self.alive

    @property
    def never_elected(self) -> bool:
        """No master ever (a first start, or after the whole group was cleaned). A state key
        that could not be read is not that: nothing may overwrite it blindly."""
        if self.state is None:
            return self.state_rev == 0
        return self.state.master_id == 0 and self.state.epoch == 0


def group_prefix(cluster: str, broker_name: str) -> str:
    return f"{PREFIX}{cluster}/{broker_name}/"


def replica_key(cluster: str, broker_name: str, replica_id: int) -> str:
    return f"{group_prefix(cluster, broker_name)}replicas/{replica_id}"


def alive_key(cluster: str, broker_name: str, replica_id: int) -> str:
    return f"{group_prefix(cluster, broker_name)}alive/{replica_id}"


def state_key(cluster: str, broker_name: str) -> str:
    return f"{group_prefix(cluster, broker_name)}state"


def name_problem(what: str, name: str) -> str | None:
    """Why `name` cannot be a cluster or broker name in a key, or None."""
    if not name.strip():
        return f"{what} is empty"
    if len(name) > MAX_NAME:
        return f"{what} is longer than {MAX_NAME} characters"
    if "/" in name or any(ord(ch) < 32 for ch in name):
        return f"{what} {name!r} has a '/' or a control character"
    return None
