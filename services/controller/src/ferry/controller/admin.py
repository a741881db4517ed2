"""The controller's admin requests (mqadmin): getSyncStateSet, getControllerMetaData,
electMaster, cleanBrokerMetadata. Run on the etcd thread, as the brokers' (handlers.py)."""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from ferry.controller.etcd_state import absent, delete, delete_prefix, mod_revision_is, put
from ferry.controller.groups import check_group_names, group_view, until_done
from ferry.controller.handlers import Decisions
from ferry.controller.model import (
    CONTROLLERS_PREFIX,
    Group,
    StateDoc,
    alive_key,
    replica_key,
    state_key,
)
from ferry.protocol.errors import (
    ControllerBrokerNotAliveError,
    ControllerElectMasterFailedError,
    ControllerInvalidCleanError,
    ControllerMetadataNotExistError,
    ControllerNotLeaderError,
)
from ferry.protocol.messages import (
    ControllerCleanBrokerDataReply,
    ControllerCleanBrokerDataRequest,
    ControllerElectMasterReply,
    ControllerElectMasterRequest,
    ControllerGetSyncStateDataRequest,
    ControllerMetadataReply,
    ControllerSyncStateDataReply,
)

log = logging.getLogger("ferry.controller")


class AdminDecisions:
    """What the controller does with each admin request; its methods block on etcd."""

    def __init__(self, decisions: Decisions) -> None:
        self.decisions = decisions

    def elect_master(self, req: ControllerElectMasterRequest) -> ControllerElectMasterReply:
        check_group_names(req.cluster, req.broker_name)
        return until_done(lambda: self._elect_master_once(req), req.broker_name)

    def _elect_master_once(
        self, req: ControllerElectMasterRequest
    ) -> ControllerElectMasterReply | None:
        group = self.decisions.etcd.group(req.cluster, req.broker_name)
        if not group.replicas:
            raise ControllerMetadataNotExistError(
                f"no replica of {req.cluster}/{req.broker_name} is registered"
            )
        target = self._target(group, req)
        state = group.state or StateDoc()
        if target and target not in group.alive:
            raise ControllerBrokerNotAliveError(f"replica {target} has no live heartbeat")
        unclean = self.decisions.config.enable_elect_unclean_master
        in_sync = group.never_elected or target in state.sync_state_set
        if target and not in_sync and not unclean:
            raise ControllerElectMasterFailedError(
                f"replica {target} is not in the sync state set {sorted(state.sync_state_set)}"
                " (enableElectUncleanMaster=false)"
            )
        skey = state_key(req.cluster, req.broker_name)
        if group.master_alive:
            if not target:
                raise ControllerElectMasterFailedError(
                    f"master {state.master_id} is alive: name the replica to switch to (-b)"
                )
            wanted = 0 if target == state.master_id else target
            if state.handover_to != wanted:
                fenced = msgspec.structs.replace(state, handover_to=wanted)
                if not self.decisions.etcd.txn(
                    [mod_revision_is(skey, group.state_rev)], [put(skey, fenced)]
                ):
                    return None
                group.state = fenced
                if wanted:
                    log.warning(
                        "%s/%s: electMaster: master %d fenced, replica %d takes over once "
                        "its lease lapses",
                        req.cluster,
                        req.broker_name,
                        state.master_id,
                        wanted,
                    )
            wait_ms = self.decisions.config.controller_heart_beat_timeout_mills
            wait_ms += 2 * self.decisions.config.scan_not_active_broker_interval
            return ControllerElectMasterReply(
                state=group_view(group), pending=bool(wanted), wait_ms=wait_ms if wanted else 0
            )
        new_state = self.decisions.elect(group, forced=target)
        if new_state is None:
            if target:  # the target was eligible: the group changed under us
                return None
            raise ControllerElectMasterFailedError(
                f"no live replica of {req.broker_name} may become master"
            )
        group.state = new_state
        return ControllerElectMasterReply(state=group_view(group))

    @staticmethod
    def _target(group: Group, req: ControllerElectMasterRequest) -> int:
        if req.replica_id:
            if req.replica_id not in group.replicas:
                raise ControllerMetadataNotExistError(f"replica {req.replica_id} is not registered")
            return req.replica_id
        if not req.broker_addr:
            return 0
        for rid, doc in group.replicas.items():
            if req.broker_addr in (doc.addr, doc.ha_addr):
                return rid
        raise ControllerMetadataNotExistError(
            f"no replica of {req.broker_name} is registered at {req.broker_addr}"
        )

    def clean(self, req: ControllerCleanBrokerDataRequest) -> ControllerCleanBrokerDataReply:
        check_group_names(req.cluster, req.broker_name)
        return until_done(lambda: self._clean_once(req), req.broker_name)

    def _clean_once(
        self, req: ControllerCleanBrokerDataRequest
    ) -> ControllerCleanBrokerDataReply | None:
        group = self.decisions.etcd.group(req.cluster, req.broker_name)
        if not group.replicas and group.state is None and not group.state_rev:
            raise ControllerMetadataNotExistError(
                f"the controller holds nothing for {req.cluster}/{req.broker_name}"
            )
        whole = not req.replica_ids
        ids = sorted(group.replicas) if whole else sorted(set(req.replica_ids))
        unknown = [i for i in ids if i not in group.replicas]
        if unknown:
            raise ControllerMetadataNotExistError(f"replicas {unknown} are not registered")
        state = group.state or StateDoc()
        if group.master_alive and (whole or state.master_id in ids):
            raise ControllerInvalidCleanError(
                f"replica {state.master_id} is the live master of {req.broker_name} and holds "
                "a write lease: stop it (or electMaster another replica) first"
            )
        living = [i for i in ids if i in group.alive]
        if living and not req.clean_living:
            raise ControllerInvalidCleanError(
                f"replicas {living} are alive; add --cleanLivingBroker to clean them anyway"
            )
        skey = state_key(req.cluster, req.broker_name)
        compare = [mod_revision_is(skey, group.state_rev)]
        if state.master_id and (whole or state.master_id in ids):
            # the master must still be dead when this commits
            compare.append(absent(alive_key(req.cluster, req.broker_name, state.master_id)))
        if not req.clean_living:
            compare += [absent(alive_key(req.cluster, req.broker_name, i)) for i in ids]
        if whole:
            if not self.decisions.etcd.txn(compare, [delete_prefix(group.prefix)]):
                return None
            log.warning("%s/%s: every replica's metadata cleaned", req.cluster, req.broker_name)
            return ControllerCleanBrokerDataReply(cleaned=ids, group_removed=True)
        ops = []
        for i in ids:
            ops += [
                delete(replica_key(req.cluster, req.broker_name, i)),
                delete(alive_key(req.cluster, req.broker_name, i)),
            ]
        if group.state is not None:
            kept = [i for i in state.sync_state_set if i not in ids]
            new_state = msgspec.structs.replace(
                state,
                sync_state_set=kept,
                sync_state_set_epoch=state.sync_state_set_epoch + (kept != state.sync_state_set),
                handover_to=0 if state.handover_to in ids else state.handover_to,
            )
            if state.master_id in ids:
                new_state = msgspec.structs.replace(
                    new_state, master_id=0, master_addr="", master_ha_addr=""
                )
            ops.append(put(skey, new_state))
        if not self.decisions.etcd.txn(compare, ops):
            return None
        log.warning("%s/%s: replicas %s cleaned", req.cluster, req.broker_name, ids)
        return ControllerCleanBrokerDataReply(cleaned=ids)

    def sync_state(self, req: ControllerGetSyncStateDataRequest) -> ControllerSyncStateDataReply:
        if req.cluster:
            check_group_names(req.cluster, "x")
        groups = self.decisions.etcd.groups(req.cluster)
        chosen = [
            g
            for (_, name), g in sorted(groups.items())
            if not req.broker_names or name in req.broker_names
        ]
        missing = sorted(set(req.broker_names) - {g.broker_name for g in chosen})
        if missing:
            raise ControllerMetadataNotExistError(
                f"the controller holds nothing for {', '.join(missing)}"
            )
        return ControllerSyncStateDataReply(groups=[group_view(g) for g in chosen])

    def metadata(self) -> ControllerMetadataReply:
        cfg = self.decisions.config
        base: dict[str, Any] = {
            "addr": self.decisions.addr,
            "etcd_endpoints": self.decisions.etcd.endpoints,
            "heartbeat_timeout_ms": cfg.controller_heart_beat_timeout_mills,
            "elect_unclean_master": cfg.enable_elect_unclean_master,
        }
        try:
            status = self.decisions.etcd.status()
            members = self.decisions.etcd.members()
            _, kvs = self.decisions.etcd.range_prefix(CONTROLLERS_PREFIX)
        except ControllerNotLeaderError:
            return ControllerMetadataReply(**base)
        names = {str(m.get("ID", "")): str(m.get("name", "")) for m in members}
        return ControllerMetadataReply(
            **base,
            controllers=sorted(kv.key[len(CONTROLLERS_PREFIX) :] for kv in kvs),
            etcd_reachable=True,
            etcd_version=str(status.get("version", "")),
            etcd_leader=names.get(str(status.get("leader", "")), str(status.get("leader", ""))),
            etcd_members=[
                f"{m.get('name', '')}={','.join(m.get('clientURLs', []))}" for m in members
            ],
        )
