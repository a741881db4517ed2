"""The controller's requests (controller mode, issue 26): brokers register and heartbeat,
admins read and change a broker group's state (getSyncStateSet, getControllerMetaData,
electMaster, cleanBrokerMetadata).

A broker group is (cluster, broker_name); its members are replicas, numbered from 1 (a
broker's brokerId in controller mode). The group's state lives in etcd; every reply carries
what the controller read there.
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import Reply, Request

MASTER_ROLE = "MASTER"
SLAVE_ROLE = "SLAVE"


class EpochEntry(msgspec.Struct, frozen=True, array_like=True):
    """The group's epoch `epoch` began at CommitLog offset `start_offset` (the new master's
    end when it was elected): a line of RocketMQ's epochFileCheckpoint."""

    epoch: int
    start_offset: int


class ReplicaStatus(msgspec.Struct, frozen=True, omit_defaults=True):
    """One registered replica as the controller sees it (alive: its heartbeat lease holds)."""

    replica_id: int
    addr: str
    ha_addr: str = ""
    priority: int = 0  # brokerElectionPriority: the lowest number wins
    registered_ms: int = 0
    alive: bool = False
    max_offset: int = 0  # as of its last heartbeat
    epoch: int = 0
    role: str = ""
    in_sync: bool = False


class BrokerGroupState(msgspec.Struct, frozen=True, omit_defaults=True):
    """A broker group's state (etcd's `state` key) and its replicas."""

    cluster: str
    broker_name: str
    master_id: int = 0  # 0: none
    master_addr: str = ""
    master_ha_addr: str = ""
    epoch: int = 0
    sync_state_set: list[int] = []
    sync_state_set_epoch: int = 0
    epochs: list[EpochEntry] = []
    replicas: list[ReplicaStatus] = []
    # electMaster asked for this replica while the master was alive: the master gets no more
    # write leases, and this replica is elected once the master's last lease has run out
    handover_to: int = 0


# ---- brokers --------------------------------------------------------------------------------


class ControllerRegisterBrokerRequest(Request, frozen=True, tag="controller_register_broker"):
    code = RequestCode.CONTROLLER_REGISTER_BROKER
    cluster: str
    broker_name: str
    replica_id: int  # >= 1
    addr: str
    ha_addr: str = ""
    priority: int = 0
    max_offset: int = 0
    epochs: list[EpochEntry] = []  # the replica's epoch file


class ControllerRegisterBrokerReply(Reply, frozen=True, tag="controller_register_broker_reply"):
    master_id: int = 0
    master_addr: str = ""
    master_ha_addr: str = ""
    epoch: int = 0
    sync_state_set: list[int] = []
    sync_state_set_epoch: int = 0
    epochs: list[EpochEntry] = []


class ControllerHeartbeatRequest(Request, frozen=True, tag="controller_heartbeat"):
    """A replica is alive (its etcd lease is refreshed). From the group's master, with the
    master's epoch, a changed sync_state_set is stored (RocketMQ's AlterSyncStateSet)."""

    code = RequestCode.BROKER_HEARTBEAT
    cluster: str
    broker_name: str
    replica_id: int
    addr: str
    ha_addr: str = ""
    max_offset: int = 0
    epoch: int = 0
    role: str = SLAVE_ROLE
    sync_state_set: list[int] = []  # master only: its in-sync replica ids (empty: unchanged)
    lease_ms: int = 0  # the write lease the master asks for (0: as long as allowed)


class ControllerHeartbeatReply(Reply, frozen=True, tag="controller_heartbeat_reply"):
    """The group's state; lease_ms > 0 only to the master: it may acknowledge writes until
    lease_ms after it SENT the heartbeat (the controller elects no other master before)."""

    master_id: int = 0
    master_addr: str = ""
    master_ha_addr: str = ""
    epoch: int = 0
    sync_state_set: list[int] = []
    sync_state_set_epoch: int = 0
    lease_ms: int = 0
    epochs: list[EpochEntry] = []


# ---- administration (mqadmin) ---------------------------------------------------------------


class ControllerGetSyncStateDataRequest(Request, frozen=True, tag="controller_get_sync_state"):
    """getSyncStateSet: the groups named, or every group of `cluster`, or every group."""

    code = RequestCode.CONTROLLER_GET_SYNC_STATE_DATA
    cluster: str = ""
    broker_names: list[str] = []


class ControllerSyncStateDataReply(Reply, frozen=True, tag="controller_sync_state"):
    groups: list[BrokerGroupState] = []


class ControllerGetMetadataRequest(Request, frozen=True, tag="controller_get_metadata"):
    code = RequestCode.CONTROLLER_GET_METADATA_INFO


class ControllerMetadataReply(Reply, frozen=True, tag="controller_metadata"):
    """getControllerMetaData: this controller, the live controllers, and its etcd."""

    addr: str
    controllers: list[str] = []  # every controller with a live registration in etcd
    etcd_endpoints: list[str] = []
    etcd_reachable: bool = False
    etcd_version: str = ""
    etcd_leader: str = ""  # the etcd member that leads (its name)
    etcd_members: list[str] = []  # name=client URLs
    heartbeat_timeout_ms: int = 0
    elect_unclean_master: bool = False


class ControllerElectMasterRequest(Request, frozen=True, tag="controller_elect_master"):
    """electMaster: make the replica at broker_addr (or replica_id) master; both empty: let
    the controller choose by its rule. A live master is first fenced: `pending` in the reply
    says the switch happens once its last write lease has run out (within wait_ms)."""

    code = RequestCode.CONTROLLER_ELECT_MASTER
    cluster: str
    broker_name: str
    broker_addr: str = ""
    replica_id: int = 0


class ControllerElectMasterReply(Reply, frozen=True, tag="controller_elect_master_reply"):
    state: BrokerGroupState
    pending: bool = False
    wait_ms: int = 0


class ControllerCleanBrokerDataRequest(Request, frozen=True, tag="controller_clean_broker_data"):
    """cleanBrokerMetadata: forget the replicas named (empty: the whole group). A replica
    still alive only with clean_living; the group's live master never."""

    code = RequestCode.CLEAN_BROKER_DATA
    cluster: str
    broker_name: str
    replica_ids: list[int] = []
    clean_living: bool = False


class ControllerCleanBrokerDataReply(Reply, frozen=True, tag="controller_clean_broker_data_reply"):
    cleaned: list[int] = []
    group_removed: bool = False


# ---- brokers' own epochs (getBrokerEpoch) ---------------------------------------------------


class GetBrokerEpochRequest(Request, frozen=True, tag="get_broker_epoch"):
    """getBrokerEpoch, asked of a broker's remoting: its epoch file, as its log holds it."""

    code = RequestCode.GET_BROKER_EPOCH_CACHE


class BrokerEpochReply(Reply, frozen=True, tag="broker_epoch"):
    cluster: str
    broker_name: str
    broker_id: int  # the replica id (controller mode), else the broker id
    role: str
    epochs: list[EpochEntry] = []


# this role's requests and replies: AnyRequest and AnyReply (the package) join them
ControllerRequest: TypeAlias = (
    ControllerRegisterBrokerRequest
    | ControllerHeartbeatRequest
    | ControllerGetSyncStateDataRequest
    | ControllerGetMetadataRequest
    | ControllerElectMasterRequest
    | ControllerCleanBrokerDataRequest
    | GetBrokerEpochRequest
)

ControllerReply: TypeAlias = (
    ControllerRegisterBrokerReply
    | ControllerHeartbeatReply
    | ControllerSyncStateDataReply
    | ControllerMetadataReply
    | ControllerElectMasterReply
    | ControllerCleanBrokerDataReply
    | BrokerEpochReply
)
