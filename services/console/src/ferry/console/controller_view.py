"""Controller mode on the cluster page: each broker group's master, epoch and in-sync set, and
its replicas (role, alive, log end, in sync), as the controller holds them (getSyncStateSet).

Where the controller is:
- the console's controllerAddr (host:port[;host:port]) when set: every group the controller
  holds is shown, even one whose brokers are all down (none is left in the name server);
- else each broker group's own controllerAddr, read from one of its brokers' config
  (getBrokerConfig) when that says enableControllerMode=true. Nothing to configure, but a
  group with no broker registered is not found, and the address must be one the console can
  reach too (set controllerAddr where the brokers name the controller by a private name).
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.admin import Admin
from ferry.admin.controller import ControllerAdmin
from ferry.client import Credentials
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import BrokerGroupState, ClusterInfoReply

MAX_CONTROLLERS = 8  # distinct controller addresses kept open (they come from brokers' config)


@dataclass(frozen=True)
class GroupView:
    cluster: str
    broker_name: str
    controller: str
    state: BrokerGroupState | None
    error: str = ""


class Controllers:
    """ControllerAdmin clients by address, started on first use."""

    def __init__(
        self,
        timeout_ms: int,
        *,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        self._timeout_ms = timeout_ms
        self._credentials = credentials
        self._tls_server_key = tls_server_key
        self._admins: dict[str, ControllerAdmin] = {}

    def get(self, addr: str) -> ControllerAdmin:
        admin = self._admins.get(addr)
        if admin is None:
            if len(self._admins) >= MAX_CONTROLLERS:
                self.close()
            admin = ControllerAdmin(
                addr,
                timeout_ms=self._timeout_ms,
                credentials=self._credentials,
                tls_server_key=self._tls_server_key,
            )
            admin.start()
            self._admins[addr] = admin
        return admin

    def close(self) -> None:
        admins, self._admins = self._admins, {}
        for admin in admins.values():
            admin.shutdown()


def controller_of(config: dict[str, str]) -> str:
    """A broker's controllerAddr when it runs in controller mode, else ""."""
    if config.get("enableControllerMode", "").lower() != "true":
        return ""
    return config.get("controllerAddr", "")


def discovered(admin: Admin, info: ClusterInfoReply) -> dict[str, list[tuple[str, str]]]:
    """controllerAddr -> (cluster, broker group) of the groups whose brokers say they run in
    controller mode (the first broker of each group that answers is asked)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for cluster, names in sorted(info.clusters.items()):
        for name in sorted(names):
            data = info.brokers.get(name)
            for _bid, addr in sorted((data.broker_addrs if data else {}).items()):
                try:
                    config = admin.broker_config(addr).config
                except FerryError:
                    continue
                controller = controller_of(config)
                if controller:
                    out.setdefault(controller, []).append((cluster, name))
                break
    return out


def group_views(
    admin: Admin, controllers: Controllers, controller_addr: str, info: ClusterInfoReply
) -> list[GroupView]:
    """Every controller-mode group the page shows, in (cluster, broker group) order."""
    views: list[GroupView] = []
    if controller_addr:
        try:
            groups = controllers.get(controller_addr).sync_state_set()
        except FerryError as err:
            return [GroupView("", "", controller_addr, None, str(err))]
        views = [GroupView(g.cluster, g.broker_name, controller_addr, g) for g in groups]
    else:
        for addr, named in discovered(admin, info).items():
            try:
                got = controllers.get(addr).sync_state_set([name for _, name in named])
            except FerryError as err:
                views += [GroupView(c, n, addr, None, str(err)) for c, n in named]
                continue
            by_name = {(g.cluster, g.broker_name): g for g in got}
            for cluster, name in named:
                state = by_name.get((cluster, name))
                why = "" if state else "the controller holds nothing for this group"
                views.append(GroupView(cluster, name, addr, state, why))
    return sorted(views, key=lambda v: (v.cluster, v.broker_name))
