"""The name server's own administration (mqadmin getNamesrvConfig, updateNamesrvConfig,
updateKvConfig, deleteKvConfig, updateOrderConf): its config and its kv store."""

from __future__ import annotations

from typing import TypeAlias

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import Reply, Request


class GetNamesrvConfigRequest(Request, frozen=True, tag="get_namesrv_config"):
    code = RequestCode.GET_NAMESRV_CONFIG


class NamesrvConfigReply(Reply, frozen=True, tag="namesrv_config"):
    config: dict[str, str]  # key -> value in force (secrets hidden)
    live_keys: list[str] = []  # the keys updateNamesrvConfig changes without a restart


class UpdateNamesrvConfigRequest(Request, frozen=True, tag="update_namesrv_config"):
    """Changes keys in the running name server (until it restarts); keys read only at
    start-up are refused."""

    code = RequestCode.UPDATE_NAMESRV_CONFIG
    properties: dict[str, str]


class PutKvConfigRequest(Request, frozen=True, tag="put_kv_config"):
    code = RequestCode.PUT_KV_CONFIG
    namespace: str
    key: str
    value: str


class GetKvConfigRequest(Request, frozen=True, tag="get_kv_config"):
    code = RequestCode.GET_KV_CONFIG
    namespace: str
    key: str


class KvConfigReply(Reply, frozen=True, tag="kv_config"):
    found: bool
    value: str = ""


class DeleteKvConfigRequest(Request, frozen=True, tag="delete_kv_config"):
    code = RequestCode.DELETE_KV_CONFIG
    namespace: str
    key: str


class KvDeletedReply(Reply, frozen=True, tag="kv_deleted"):
    existed: bool


NamesrvAdminRequest: TypeAlias = (
    GetNamesrvConfigRequest
    | UpdateNamesrvConfigRequest
    | PutKvConfigRequest
    | GetKvConfigRequest
    | DeleteKvConfigRequest
)

NamesrvAdminReply: TypeAlias = NamesrvConfigReply | KvConfigReply | KvDeletedReply
