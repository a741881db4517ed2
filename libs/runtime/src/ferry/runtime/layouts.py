"""The layouts of `ferry dev up` and the tests: a name server and a broker group (with the
console, a slave group, or a controlled group of replicas on a private etcd)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ferry.runtime.broker_group import (
    LOOPBACK_ANY,
    LocalCluster,
    security_keys,
    start_broker_services,
)
from ferry.runtime.processes import (
    LineSink,
    ServiceProcess,
    service_args,
    spawn_service,
    start_service,
    wait_ready,
)


def start_local_cluster(
    data_dir: str,
    *,
    namesrv_port: int = 0,
    broker_port: int = 0,
    conf_file: str | None = None,
    overrides: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    sink: LineSink | None = None,
    console_port: int | None = None,
    slave: bool = False,
    ha: bool = False,
    store_endpoint: str = LOOPBACK_ANY,
    rocketmq_port: int | None = None,
    proxy_port: int | None = None,
) -> LocalCluster:
    """The embedded default of `ferry dev up`: a name server and a broker group, and the
    console when console_port is given (0: any free port). With the console, every broker
    service exports its spans to the console's /v1/traces unless OTEL_* variables say
    where they go. store_endpoint: where the master's store listens for its own services
    (bench/store_endpoint.py compares ipc:// with TCP). rocketmq_port: the name server's
    RocketMQ door (0: any free port), the brokers' doors then on free ports; None: no doors.
    proxy_port: a gRPC proxy for RocketMQ 5's clients on that port (0: any free), once the
    brokers serve; None: none."""
    cluster = LocalCluster()
    if rocketmq_port is not None:
        overrides = {"rocketmqListenPort": "0", **(overrides or {})}
    try:
        namesrv_settings = {
            **security_keys(conf_file, overrides),
            "listenPort": str(namesrv_port),
        }
        if rocketmq_port is not None:
            namesrv_settings["rocketmqListenPort"] = str(rocketmq_port)
        namesrv = spawn_service("namesrv", service_args(None, namesrv_settings), env=env, sink=sink)
        cluster.processes.append(namesrv)

        def namesrv_ready() -> str:
            wait_ready(namesrv)
            cluster.namesrv_addr = namesrv.endpoints["addr"]
            cluster.rocketmq_addr = namesrv.endpoints.get("rocketmq", "")
            return cluster.namesrv_addr

        if console_port is not None or ha:
            namesrv_ready()
        if console_port is not None:
            console = start_service(
                "console",
                [
                    "--namesrv",
                    cluster.namesrv_addr,
                    "--port",
                    str(console_port),
                    "--data-dir",
                    os.path.join(data_dir, "console"),
                ],
                env=env,
                sink=sink,
            )
            cluster.processes.append(console)
            cluster.console_url = console.endpoints["url"]
            env = traces_to(cluster.console_url, env)
        if ha:
            start_controlled_group(
                cluster,
                data_dir,
                broker_port=broker_port,
                conf_file=conf_file,
                overrides=overrides,
                env=env,
                sink=sink,
            )
            start_proxy(cluster, proxy_port, env=env, sink=sink, overrides=overrides)
            return cluster
        start_broker_services(
            cluster,
            os.path.join(data_dir, "broker-a"),
            namesrv_addr=cluster.namesrv_addr or namesrv_ready,
            broker_port=broker_port,
            conf_file=conf_file,
            overrides=overrides,
            env=env,
            sink=sink,
            store_endpoint=store_endpoint,
        )
        if slave:
            slave_group = add_slave_group(
                cluster,
                os.path.join(data_dir, "broker-a-s"),
                conf_file=conf_file,
                overrides=overrides,
                env=env,
                sink=_labelled(sink, "-slave"),
            )
            for sp in slave_group.processes:
                sp.label = sp.name + "-slave"
            cluster.processes.extend(slave_group.processes)
        if proxy_port is not None and not cluster.namesrv_addr:
            namesrv_ready()
        start_proxy(cluster, proxy_port, env=env, sink=sink, overrides=overrides)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def start_proxy(
    cluster: LocalCluster,
    port: int | None,
    *,
    env: Mapping[str, str] | None = None,
    sink: LineSink | None = None,
    overrides: Mapping[str, str] | None = None,
) -> None:
    """The gRPC proxy on the cluster's name server (None: no proxy). The brokers' metrics
    exporter (overrides) is the proxy's too; a PROM port of 0 is a free port for it as well,
    any other leaves it its own (5558) beside the broker's."""
    if port is None:
        return
    settings = {"namesrvAddr": cluster.namesrv_addr, "proxyListenPort": str(port)}
    for key in PROXY_METRICS_KEYS:
        if key in (overrides or {}):
            settings[key] = (overrides or {})[key]
    if (overrides or {}).get("metricsPromExporterPort") == "0":
        settings["metricsPromExporterPort"] = "0"
    proxy = start_service("proxy", service_args(None, settings), env=env, sink=sink)
    cluster.processes.append(proxy)
    cluster.proxy_addr = proxy.endpoints["grpc"]


PROXY_METRICS_KEYS = ("metricsExporterType", "metricsGrpcExporterTarget")
HA_REPLICAS = 3
HA_HEARTBEAT_TIMEOUT_MS = 5000  # the controller's: failover in about 7 s here


def start_controller(
    etcd_endpoint: str,
    heartbeat_timeout_ms: int,
    *,
    scan_ms: int = 1000,
    env: Mapping[str, str] | None = None,
    sink: LineSink | None = None,
    extra: Mapping[str, str] | None = None,
) -> ServiceProcess:
    """A controller on a free port, on the etcd at etcd_endpoint; extra: more keys (the
    brokers' security keys)."""
    settings = {
        **(extra or {}),
        "etcdEndpoints": etcd_endpoint,
        "controllerListenPort": "0",
        "controllerHeartBeatTimeoutMills": str(heartbeat_timeout_ms),
        "scanNotActiveBrokerInterval": str(scan_ms),
    }
    return start_service("controller", service_args(None, settings), env=env, sink=sink)


def start_controlled_group(
    cluster: LocalCluster,
    data_dir: str,
    *,
    broker_port: int = 0,
    replicas: int = HA_REPLICAS,
    conf_file: str | None = None,
    overrides: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    sink: LineSink | None = None,
) -> None:
    """`ferry dev up --ha`'s broker side: a private etcd, a controller, and broker-a as
    `replicas` replicas in controller mode, each a `ferry serve broker` tree of its own (so
    that killing one tree models losing one machine), appended to `cluster`."""
    from ferry.runtime.etcd import start_etcd

    etcd = start_etcd(os.path.join(data_dir, "etcd"))
    cluster.after_stop.append(etcd.stop)
    controller = start_controller(
        etcd.endpoint,
        HA_HEARTBEAT_TIMEOUT_MS,
        env=env,
        sink=sink,
        extra=security_keys(conf_file, overrides),
    )
    cluster.processes.append(controller)
    cluster.controller_addr = controller.endpoints["addr"]
    for replica in range(1, replicas + 1):
        settings = {
            "brokerRole": "SYNC_MASTER",
            **(overrides or {}),
            "brokerName": "broker-a",
            "brokerId": str(replica),
            "enableControllerMode": "true",
            "controllerAddr": cluster.controller_addr,
            "namesrvAddr": cluster.namesrv_addr,
            "storePathRootDir": os.path.join(data_dir, f"broker-a-{replica}"),
            # replica 1 on the broker port, the others beside it
            "listenPort": str(broker_port + 10 * (replica - 1) if broker_port else 0),
        }
        tree = start_service(
            "broker",
            ["serve", "broker", *service_args(conf_file, settings)],
            env=env,
            sink=_labelled(sink, f"-{replica}"),
            ready_timeout=120.0,
        )
        tree.label = f"broker-{replica}"
        cluster.processes.append(tree)
    cluster.broker_addr = cluster.processes[-replicas].endpoints["addr"]


def _labelled(sink: LineSink | None, suffix: str) -> LineSink | None:
    """`sink` with each service's name suffixed: the slave group's broker-store apart from
    the master's in `ferry dev up --slave`'s output."""
    if sink is None:
        return None
    return lambda name, line: sink(name + suffix, line)


OTEL_TRACE_KEYS = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


def traces_to(console_url: str, env: Mapping[str, str] | None) -> dict[str, str]:
    """`env` (or ours) with spans exported to the console, unless it already says where
    spans go (or that they go nowhere)."""
    out = dict(os.environ if env is None else env)
    if not any(out.get(key) for key in OTEL_TRACE_KEYS):
        out["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"{console_url}/v1/traces"
        out["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
    return out


def add_slave_group(
    cluster: LocalCluster,
    store_root: str,
    *,
    broker_id: int = 1,
    conf_file: str | None = None,
    overrides: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    sink: LineSink | None = None,
) -> LocalCluster:
    """Starts a slave group of the master group in `cluster` (same brokerName, its own store,
    index, scheduler, check-back, ha-replicator and remoting, on free ports), as a LocalCluster
    of its own: stop or kill it apart from the master's."""
    slave = LocalCluster(namesrv_addr=cluster.namesrv_addr)
    try:
        start_broker_services(
            slave,
            store_root,
            namesrv_addr=cluster.namesrv_addr,
            conf_file=conf_file,
            overrides={
                **(overrides or {}),
                "brokerRole": "SLAVE",
                "brokerId": str(broker_id),
                "haMasterAddress": cluster.ha_addr,
            },
            env=env,
            sink=sink,
        )
    except BaseException:
        slave.stop()
        raise
    return slave
