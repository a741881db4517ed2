"""The supervisor's side of a broker tree's channel (controller mode): `ferry serve broker`
serves its broker agent, a process of the tree, what the agent needs of the tree.

The agent (ferry.controller.agent) asks where the group's services listen and which processes
run (tree_status), and has services restarted with new broker.conf keys (tree_reconfigure: a
role change, Supervisor.reconfigure). The channel is a Service of its own on a loopback port,
served from a thread of the supervisor's process: with authentication it takes only the
cluster's own signature (an internal port), and with tlsEnable it speaks CURVE, like every port.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from ferry.protocol.messages import (
    OkReply,
    TreeProcess,
    TreeReconfigureRequest,
    TreeStatusReply,
    TreeStatusRequest,
)
from ferry.runtime.launcher import (
    LOOPBACK_ANY,
    LaunchError,
    LineSink,
    LocalCluster,
    ServiceProcess,
    service_args,
    spawn_service,
    wait_ready,
)
from ferry.runtime.service import Call, Service
from ferry.runtime.supervisor import Supervisor

SERVICE_NAME = "broker-tree"
AGENT = "broker-agent"
TREE_ENV = "FERRY_TREE_ENDPOINT"  # how the agent learns where the channel is
BIND_TIMEOUT_S = 10.0


class TreeChannel:
    """Serves tree_status and tree_reconfigure for `cluster` from a thread of its own (the
    supervisor's thread waits on stops and starts; the agent must be answered meanwhile)."""

    def __init__(
        self, cluster: LocalCluster, supervisor: Supervisor, endpoint: str = LOOPBACK_ANY
    ) -> None:
        self.cluster = cluster
        self.supervisor = supervisor
        self.endpoint = ""
        self._asked = endpoint
        self._service: Service | None = None
        self._bound = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="tree-channel", daemon=True)

    def start(self) -> str:
        """Binds and serves; returns the endpoint bound."""
        self._thread.start()
        if not self._bound.wait(BIND_TIMEOUT_S):
            raise LaunchError(f"the tree's channel did not bind {self._asked} in time")
        if self._error is not None:
            raise LaunchError(f"the tree's channel cannot bind {self._asked}: {self._error}")
        return self.endpoint

    def stop(self) -> None:
        if self._service is not None:
            self._service.stop()
        if self._thread.is_alive():
            self._thread.join(5)

    def _serve(self) -> None:
        # made and bound on its own thread: bind_router installs signal handlers only on the
        # main thread, whose handlers are the supervisor's
        try:
            service = Service(SERVICE_NAME)
            service.on(TreeStatusRequest, self._status)
            service.on(TreeReconfigureRequest, self._reconfigure)
            self.endpoint = service.bind_router(self._asked)
        except Exception as exc:  # noqa: BLE001 - start() reports it
            self._error = exc
            self._bound.set()
            return
        self._service = service
        self._bound.set()
        service.run(handle_signals=False)

    def _status(self, _req: TreeStatusRequest, _call: Call) -> TreeStatusReply:
        cluster = self.cluster
        return TreeStatusReply(
            broker_addr=cluster.broker_addr,
            ha_addr=cluster.ha_addr,
            store_endpoint=cluster.store_endpoint,
            processes=[
                TreeProcess(sp.name, sp.pid, sp.announced, sp.alive())
                for sp in list(cluster.processes)
            ],
        )

    def _reconfigure(self, req: TreeReconfigureRequest, _call: Call) -> OkReply:
        self.supervisor.reconfigure(req.service, req.settings)
        return OkReply()


def start_agent(
    cluster: LocalCluster,
    supervisor: Supervisor,
    channel: str,
    *,
    conf_file: str | None,
    overrides: Mapping[str, str],
    sink: LineSink | None = None,
    env: Mapping[str, str] | None = None,
) -> ServiceProcess:
    """Starts the tree's broker agent on `channel` and waits for its READY line; the
    supervisor then restarts it like the tree's services. overrides: the tree's own keys (its
    brokerRole is the one it serves as master)."""
    agent_env = {**(os.environ if env is None else env), TREE_ENV: channel}
    sp = spawn_service(AGENT, service_args(conf_file, overrides), env=agent_env, sink=sink)
    wait_ready(sp)
    supervisor.add(sp)
    return sp
