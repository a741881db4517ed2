"""etcd through etcd3gw (its v3 JSON gateway): reads of broker groups at one revision, leases,
and transactions. Blocking calls: the controller makes them on its etcd thread (worker.py).

Every failure to reach etcd (refused, timed out, no leader, an answer that is not JSON)
becomes ControllerNotLeaderError, retriable: this controller decides nothing without etcd.
After one, calls fail at once for BACKOFF_S, so that a hung etcd costs one timeout per
backoff rather than one per request. With several endpoints, a failure moves to the next.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import requests
from etcd3gw.client import Etcd3Client
from etcd3gw.exceptions import (
    ConnectionFailedError,
    ConnectionTimeoutError,
    Etcd3Exception,
    InternalServerError,
)

from ferry.controller.model import (
    PREFIX,
    Alive,
    AliveDoc,
    Group,
    ReplicaDoc,
    StateDoc,
)
from ferry.protocol.errors import ControllerNotLeaderError

log = logging.getLogger("ferry.controller.etcd")

API_PATH = "/v3/"  # etcd 3.4's gateway answers /v3/ (and /v3beta/); no discovery round trip
BACKOFF_S = 0.5


def b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


@dataclass(frozen=True)
class KV:
    key: str
    value: bytes
    mod_revision: int
    lease: int


# ---- transaction parts (etcd's JSON) --------------------------------------------------------


def mod_revision_is(key: str, revision: int) -> dict[str, Any]:
    """True when key's last change is at `revision` (0: the key does not exist)."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": revision}


def absent(key: str) -> dict[str, Any]:
    return {"key": b64(key), "target": "VERSION", "result": "EQUAL", "version": 0}


def put(key: str, doc: msgspec.Struct, lease: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"key": b64(key), "value": b64(msgspec.json.encode(doc))}
    if lease:
        body["lease"] = lease
    return {"request_put": body}


def delete(key: str) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key)}}


def delete_prefix(prefix: str) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(prefix), "range_end": b64(prefix_end(prefix))}}


def prefix_end(prefix: str) -> bytes:
    raw = bytearray(prefix.encode())
    raw[-1] += 1  # prefixes here end in '/', never 0xff
    return bytes(raw)


class EtcdRejectedError(ControllerNotLeaderError):
    """etcd answered, but refused the request (a lease that lapsed meanwhile, a value too
    large): not an outage, so no backoff and no other endpoint."""


# what says etcd is away (as opposed to a request it refused)
UNREACHABLE = (
    ConnectionFailedError,
    ConnectionTimeoutError,
    InternalServerError,
    requests.RequestException,
    ValueError,  # an answer that is not JSON
)


class Etcd:
    """etcd3gw clients for the endpoints, one used at a time; one thread uses it."""

    def __init__(self, endpoints: list[tuple[str, str, int]], timeout_s: float) -> None:
        self.endpoints = [f"{scheme}://{host}:{port}" for scheme, host, port in endpoints]
        self._clients = [
            Etcd3Client(host=host, port=port, protocol=scheme, timeout=timeout_s, api_path=API_PATH)
            for scheme, host, port in endpoints
        ]
        self._current = 0
        self._down_until = 0.0
        self._last_error = ""
        self._lock = threading.Lock()  # the metadata request may come from the loop thread
        self.reachable = True

    def close(self) -> None:
        for client in self._clients:
            client.session.close()

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        with self._lock:
            if time.monotonic() < self._down_until:
                raise ControllerNotLeaderError(f"etcd unreachable: {self._last_error}")
            error = ""
            for _ in self._clients:
                client = self._clients[self._current]
                try:
                    result = client.post(client.get_url(path), json=body)
                except UNREACHABLE as exc:
                    error = f"{self.endpoints[self._current]}: {describe(exc)}"
                    self._current = (self._current + 1) % len(self._clients)
                    continue
                except Etcd3Exception as exc:
                    raise EtcdRejectedError(f"etcd refused {path}: {describe(exc)}") from None
                if not self.reachable:
                    log.info("etcd reachable again at %s", self.endpoints[self._current])
                self.reachable = True
                return result
            if self.reachable:
                log.warning("etcd unreachable: %s", error)
            self.reachable = False
            self._last_error = error
            self._down_until = time.monotonic() + BACKOFF_S
            raise ControllerNotLeaderError(f"etcd unreachable: {error}")

    # ---- reads ----

    def range_prefix(self, prefix: str) -> tuple[int, list[KV]]:
        """(revision, every key under prefix) in one read: a consistent snapshot."""
        result = self._post("/kv/range", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))})
        revision = int(result.get("header", {}).get("revision", 0))
        kvs = [
            KV(
                key=unb64(item["key"]).decode(errors="replace"),
                value=unb64(item.get("value", "")),
                mod_revision=int(item.get("mod_revision", 0)),
                lease=int(item.get("lease", 0)),
            )
            for item in result.get("kvs", [])
        ]
        return revision, kvs

    def groups(self, cluster: str = "") -> dict[tuple[str, str], Group]:
        """Every broker group (of `cluster`, when given) at one revision."""
        _, kvs = self.range_prefix(f"{PREFIX}{cluster}/" if cluster else PREFIX)
        return parse_groups(kvs)

    def group(self, cluster: str, broker_name: str) -> Group:
        _, kvs = self.range_prefix(f"{PREFIX}{cluster}/{broker_name}/")
        found = parse_groups(kvs).get((cluster, broker_name))
        return found or Group(cluster, broker_name)

    # ---- writes ----

    def txn(self, compare: Iterable[dict[str, Any]], success: Iterable[dict[str, Any]]) -> bool:
        """Applies `success` when every compare holds; False (nothing done) when one fails."""
        result = self._post("/kv/txn", {"compare": list(compare), "success": list(success)})
        return bool(result.get("succeeded", False))

    def grant(self, ttl_s: int) -> int:
        return int(self._post("/lease/grant", {"TTL": ttl_s, "ID": 0})["ID"])

    def keepalive(self, lease: int) -> int:
        """The lease's TTL after the refresh; -1 when it has lapsed (or never existed)."""
        result = self._post("/lease/keepalive", {"ID": lease})
        return int(result.get("result", {}).get("TTL", -1))

    def status(self) -> dict[str, Any]:
        return dict(self._post("/maintenance/status", {}))

    def members(self) -> list[dict[str, Any]]:
        return list(self._post("/cluster/member/list", {}).get("members", []))


def describe(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200] if lines else 'no answer'}"


def parse_groups(kvs: Iterable[KV]) -> dict[tuple[str, str], Group]:
    """Broker groups from keys /ferry/<cluster>/<broker>/...; undecodable values are skipped
    with a warning (a hand-edited key must not stop the controller)."""
    groups: dict[tuple[str, str], Group] = {}
    for kv in kvs:
        parts = kv.key[len(PREFIX) :].split("/")
        if not kv.key.startswith(PREFIX) or len(parts) not in (3, 4):
            continue
        cluster, broker_name, kind = parts[0], parts[1], parts[2]
        group = groups.setdefault((cluster, broker_name), Group(cluster, broker_name))
        try:
            if kind == "state" and len(parts) == 3:
                group.state = msgspec.json.decode(kv.value, type=StateDoc)
                group.state_rev = kv.mod_revision
            elif kind == "replicas" and len(parts) == 4:
                group.replicas[int(parts[3])] = msgspec.json.decode(kv.value, type=ReplicaDoc)
            elif kind == "alive" and len(parts) == 4:
                doc = msgspec.json.decode(kv.value, type=AliveDoc)
                group.alive[int(parts[3])] = Alive(doc, kv.lease)
        except (msgspec.DecodeError, ValueError) as exc:
            log.warning("etcd key %s skipped: %s", kv.key, exc)
            if kind == "state":  # unreadable: no election may overwrite it blindly
                group.state_rev = kv.mod_revision
    return {key: g for key, g in groups.items() if g.replicas or g.state or g.alive}
