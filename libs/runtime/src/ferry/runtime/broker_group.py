"""One broker group as local processes: the store, the index, the scheduler, the check-back,
the ha-replicator and remoting wired to them (LocalCluster, start_broker_services)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import msgspec

from ferry.protocol.auth import Credentials
from ferry.protocol.curve import CurveClient
from ferry.protocol.messages import ClusterInfoReply, GetClusterInfoRequest
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.processes import (
    LaunchError,
    LineSink,
    ServiceProcess,
    service_args,
    spawn_service,
    wait_ready,
)
from ferry.runtime.properties import read_properties
from ferry.runtime.security.config import SECURITY_KEYS, SecurityConfig
from ferry.runtime.security.curve import internal_client

LOOPBACK_ANY = "tcp://127.0.0.1:0"  # a free port on loopback, for wiring a cluster's own services


@dataclass
class LocalCluster:
    """A name server and one broker group as local processes."""

    processes: list[ServiceProcess] = field(default_factory=list)
    namesrv_addr: str = ""
    broker_addr: str = ""
    store_endpoint: str = ""
    ha_addr: str = ""  # the broker group's HA endpoint (host:port): slaves connect here
    console_url: str = ""
    controller_addr: str = ""
    # RocketMQ's remoting protocol: the name server's door (what RocketMQ clients are given)
    # and the broker group's master's
    rocketmq_addr: str = ""
    broker_rocketmq_addr: str = ""
    proxy_addr: str = ""  # the gRPC proxy's endpoint, for RocketMQ 5's clients
    # run after the processes are stopped (a private etcd)
    after_stop: list[Callable[[], None]] = field(default_factory=list)

    def get(self, name: str) -> ServiceProcess:
        for sp in self.processes:
            if sp.name == name:
                return sp
        raise KeyError(name)

    def stop(self, timeout: float = 10.0) -> None:
        # All are told at once (dependents first), then waited for: each one's shutdown
        # (a flush, a deregistration) runs beside the others' rather than after them.
        # One deadline for all: a tree with several hung processes stops in `timeout`, not
        # in a timeout for each.
        for sp in reversed(self.processes):
            sp.terminate()
        deadline = time.monotonic() + timeout
        for sp in reversed(self.processes):
            sp.stop(max(0.0, deadline - time.monotonic()))
        for step in self.after_stop:
            step()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def start_broker_services(
    cluster: LocalCluster,
    store_root: str,
    *,
    namesrv_addr: str | Callable[[], str],
    broker_port: int = 0,
    conf_file: str | None = None,
    overrides: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    sink: LineSink | None = None,
    store_endpoint: str = LOOPBACK_ANY,
) -> None:
    """Starts broker-store, the index (following the store's feed), the scheduler, the
    transaction check-back, the ha-replicator and broker-remoting wired to them, appending
    them to `cluster`. namesrv_addr may be a function that waits for it: a name server
    starting beside the store is needed only by remoting."""
    base = {"storePathRootDir": store_root, **(overrides or {})}

    def spawn(name: str, settings: Mapping[str, str]) -> ServiceProcess:
        sp = spawn_service(name, service_args(conf_file, {**base, **settings}), env=env, sink=sink)
        cluster.processes.append(sp)  # appended at once: a later failure stops it too
        return sp

    def start(name: str, settings: Mapping[str, str]) -> ServiceProcess:
        sp = spawn(name, settings)
        wait_ready(sp)
        return sp

    store = start(
        "broker-store",
        {"storeEndpoint": store_endpoint, "storeFeedEndpoint": LOOPBACK_ANY},
    )
    cluster.store_endpoint = store.endpoints["endpoint"]
    on_store = {"storeEndpoint": cluster.store_endpoint}
    on_feed = {**on_store, "storeFeedEndpoint": store.endpoints["feed"]}
    # These four need only the store: they start side by side, which shortens a start.
    index = spawn("index", {**on_feed, "indexEndpoint": LOOPBACK_ANY})
    scheduler = spawn("scheduler", {**on_store, "schedulerEndpoint": LOOPBACK_ANY})
    checkback = spawn("checkback", {**on_store, "checkbackEndpoint": LOOPBACK_ANY})
    ha = spawn("ha-replicator", {**on_feed, "listenPort": str(broker_port)})
    for sp in (index, scheduler, checkback, ha):
        wait_ready(sp)
    cluster.ha_addr = ha.endpoints["addr"]
    if callable(namesrv_addr):
        namesrv_addr = namesrv_addr()
    remoting = start(
        "broker-remoting",
        {
            **on_store,
            "indexEndpoint": index.endpoints["endpoint"],
            "schedulerEndpoint": scheduler.endpoints["endpoint"],
            "checkbackEndpoint": checkback.endpoints["endpoint"],
            "namesrvAddr": namesrv_addr,
            "listenPort": str(broker_port),
            "haListenPort": cluster.ha_addr.rpartition(":")[2],
        },
    )
    cluster.broker_addr = remoting.endpoints["addr"]
    cluster.broker_rocketmq_addr = remoting.endpoints.get("rocketmq", "")
    if namesrv_addr and not _waits_for_a_lease(conf_file, base):
        keys = security_config(conf_file, overrides)
        wait_registered(
            namesrv_addr.split(";", maxsplit=1)[0],
            cluster.broker_addr,
            credentials=keys.inner_credentials() if keys.authentication_enabled else None,
            curve=(
                internal_client(keys.server_key_pair()[0], keys.internal_key_pair())
                if keys.tls_enable
                else None
            ),
        )


def _waits_for_a_lease(conf_file: str | None, settings: Mapping[str, str]) -> bool:
    """A master in controller mode registers only once its agent granted it a write lease
    (ferry.runtime.lease): nothing to wait for at start."""
    raw = dict(read_properties(conf_file)) if conf_file else {}
    raw.update(settings)
    controlled = raw.get("enableControllerMode", "false").strip().lower() == "true"
    return controlled and raw.get("brokerRole", "ASYNC_MASTER").strip() != "SLAVE"


def security_keys(conf_file: str | None, overrides: Mapping[str, str] | None) -> dict[str, str]:
    """The security keys of a broker's settings: what its name server and controller must
    be given alike (innerClientAuthenticationCredentials above all)."""
    raw = dict(read_properties(conf_file)) if conf_file else {}
    raw.update(overrides or {})
    return {k: v for k, v in raw.items() if k in SECURITY_KEYS}


def security_config(conf_file: str | None, overrides: Mapping[str, str] | None) -> SecurityConfig:
    """How the launcher asks its own questions: signed and encrypted as the cluster's own."""
    return msgspec.convert(security_keys(conf_file, overrides), SecurityConfig, strict=False)


def wait_registered(
    namesrv_addr: str,
    broker_addr: str,
    timeout: float = 20.0,
    credentials: Credentials | None = None,
    curve: CurveClient | None = None,
) -> None:
    """Waits until the name server routes to broker_addr, so that a cluster reported ready
    is one clients can use at once (registration runs after remoting's READY). A name server
    that does not answer at all is not waited for: the broker registers when it comes."""
    started = time.monotonic()
    deadline = started + timeout
    answered = False
    with BlockingClient(f"tcp://{namesrv_addr}", credentials=credentials, curve=curve) as client:
        while True:
            answer = client.call(GetClusterInfoRequest(), 500)
            if answer is not None:
                answered = True
                reply = answer[0]
                if isinstance(reply, ClusterInfoReply) and any(
                    broker_addr in data.broker_addrs.values() for data in reply.brokers.values()
                ):
                    return
            if not answered and time.monotonic() - started > 2.0:
                return
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"broker {broker_addr} did not register with {namesrv_addr} in {timeout:.0f}s"
                )
            time.sleep(0.05)  # between polls of a deadline-bounded wait
