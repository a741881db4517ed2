"""A secure cluster for the security tests, and sample requests built from the protocol.

sample(T) builds an instance of any request type from its msgspec type info, naming the test's
topic and group wherever a field is a topic or group, so that a request that got through
would touch real data (and the "changes nothing" check would see it).
"""

from __future__ import annotations

import enum
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
from itest_support import Cluster, start_cluster

from ferry.protocol.auth import Credentials, unseal
from ferry.protocol.messages import (
    AuthSnapshot,
    AuthSnapshotReply,
    ErrorReply,
    GetAllSubscriptionGroupRequest,
    GetAllTopicConfigRequest,
    GetAllTopicListRequest,
    GetAuthSnapshotRequest,
    GetClusterInfoRequest,
    QueryConsumerOffsetRequest,
    StoreQueueOffsetsRequest,
    StoreStatusRequest,
)
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.etcd import EtcdProcess, start_etcd
from ferry.runtime.launcher import ServiceProcess, start_controller

TOPIC = "orders"
GROUP = "g-orders"
INNER = Credentials("ferry-inner", "inner-secret-0123")
ROOT = Credentials("root", "root-secret-0123")
# a Normal user the refusal tests create without any ACL, and a wrong secret for it
NOBODY = Credentials("nobody", "nobody-secret-0123")
WRONG = Credentials("nobody", "not-the-secret")
SECURITY = {
    "authenticationEnabled": "true",
    "authorizationEnabled": "true",
    "innerClientAuthenticationCredentials": json.dumps(
        {"accessKey": INNER.access_key, "secretKey": INNER.secret_key}
    ),
    "initAuthenticationUser": json.dumps(
        {"username": ROOT.access_key, "password": ROOT.secret_key}
    ),
}


@dataclass
class SecureCluster:
    cluster: Cluster
    etcd: EtcdProcess
    controller: ServiceProcess

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv

    def ports(self) -> dict[str, str]:
        """Every request port of every process: service label -> tcp endpoint."""
        out = {}
        for sp in [*self.cluster.local.processes, self.controller]:
            for key, value in sp.endpoints.items():
                if key in ("addr", "endpoint"):
                    out[sp.name] = value if "://" in value else f"tcp://{value}"
        return out

    def stop(self) -> None:
        self.controller.stop()
        self.cluster.local.stop()
        self.etcd.stop()


def start_secure(
    tmp_path: Path,
    env: dict[str, str] | None = None,
    *,
    rocketmq_port: int | None = None,
    **overrides: str,
) -> SecureCluster:
    """A name server, a broker group and a controller (on its etcd), all with authentication
    and authorization on; the broker pushes its users to the controller too. rocketmq_port:
    the RocketMQ doors of the name server and the broker as well."""
    etcd = start_etcd(str(tmp_path / "etcd"))
    controller = None
    try:
        controller = start_controller(
            etcd.endpoint,
            5000,
            extra={k: v for k, v in SECURITY.items() if k != "initAuthenticationUser"},
        )
        cluster = start_cluster(
            tmp_path,
            env,
            {**SECURITY, "controllerAddr": controller.endpoints["addr"], **overrides},
            rocketmq_port=rocketmq_port,
        )
    except BaseException:
        if controller is not None:
            controller.stop()
        etcd.stop()
        raise
    return SecureCluster(cluster, etcd, controller)


def generate_keys(directory: Path) -> dict[str, str]:
    """`ferry keys generate directory`, and the broker.conf keys that turn CURVE on with them
    (clients then take `directory / "server.key"`)."""
    subprocess.run(
        [sys.executable, "-m", "ferry.cli", "keys", "generate", str(directory)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return {
        "tlsEnable": "true",
        "tlsServerKeyFile": str(directory / "server.key_secret"),
        "tlsInternalKeyFile": str(directory / "internal.key_secret"),
    }


# ---- sample requests ------------------------------------------------------------------------


def sample(request_type: type[Any]) -> Any:
    info = mi.type_info(request_type)
    assert isinstance(info, mi.StructType)
    return _struct(info)


def _struct(info: mi.StructType) -> Any:
    values = {f.name: _value(f.name, f.type) for f in info.fields}
    return info.cls(**values)


def _value(name: str, t: mi.Type) -> Any:
    if isinstance(t, mi.StrType):
        if "topic" in name:
            return TOPIC
        if "group" in name:
            return GROUP
        if name == "subject":
            return "User:nobody"
        return "x"
    if isinstance(t, mi.BoolType):
        return False
    if isinstance(t, mi.IntType):
        return 1
    if isinstance(t, mi.FloatType):
        return 1.0
    if isinstance(t, (mi.BytesType, mi.ByteArrayType, mi.MemoryViewType)):
        return b"x"
    if isinstance(t, mi.ListType):
        return [_value(name, t.item_type)]
    if isinstance(t, mi.DictType):
        return {}
    if isinstance(t, mi.StructType):
        return _struct(t)
    if isinstance(t, mi.EnumType):
        return next(iter(t.cls)) if issubclass(t.cls, enum.Enum) else None
    if isinstance(t, mi.LiteralType):
        return t.values[0]
    if isinstance(t, mi.UnionType):
        choices = [u for u in t.types if not isinstance(u, mi.NoneType)]
        return _value(name, choices[0]) if choices else None
    if isinstance(t, mi.NoneType):
        return None
    return msgspec.UNSET


# ---- asking a port, and what a refused request must not change ----

TIMEOUT_MS = 5000


def ask(endpoint: str, body: Any, creds: Credentials | None) -> Any:
    with BlockingClient(endpoint, credentials=creds) as client:
        answer = client.call(body, TIMEOUT_MS)
    assert answer is not None, f"{endpoint} did not answer {type(body).__name__}"
    return answer[0]


def code_of(reply: Any) -> int:
    return reply.code if isinstance(reply, ErrorReply) else 0


def state(c: SecureCluster) -> dict[str, Any]:
    """What a refused request must not change, read as the cluster itself and as root."""
    ports = c.ports()
    reads = {
        "store": (ports["broker-store"], StoreStatusRequest()),
        "queues": (ports["broker-store"], StoreQueueOffsetsRequest(TOPIC, [0, 1])),
        "topics": (ports["broker-remoting"], GetAllTopicConfigRequest()),
        "groups": (ports["broker-remoting"], GetAllSubscriptionGroupRequest()),
        "offset0": (ports["broker-remoting"], QueryConsumerOffsetRequest(GROUP, TOPIC, 0)),
        "offset1": (ports["broker-remoting"], QueryConsumerOffsetRequest(GROUP, TOPIC, 1)),
        "routes": (ports["namesrv"], GetAllTopicListRequest()),
        "cluster": (ports["namesrv"], GetClusterInfoRequest()),
    }
    out = {name: msgspec.to_builtins(ask(ep, body, INNER)) for name, (ep, body) in reads.items()}
    for key in ("flushed_offset", "log_syncs", "disk_used_ratio", "disk_free_bytes"):
        out["store"].pop(key, None)
    # users and ACLs with their passwords: the snapshot a slave copies, opened as the cluster
    reply = ask(ports["broker-remoting"], GetAuthSnapshotRequest(), INNER)
    assert isinstance(reply, AuthSnapshotReply) and reply.sealed
    opened = unseal(INNER.secret_key, reply.sealed)
    assert opened is not None
    out["auth"] = msgspec.to_builtins(msgspec.msgpack.decode(opened, type=AuthSnapshot))
    return out
