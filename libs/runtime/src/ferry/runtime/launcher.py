"""Starts services as processes, waits for their READY lines, stops them cleanly.

Used by `ferry dev up`, `ferry serve` and the integration tests, so that what the tests run is
what users run. Services are started by module (`python -m ferry.store`), never imported here.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import msgspec

from ferry.protocol.auth import Credentials
from ferry.protocol.curve import CurveClient
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import ClusterInfoReply, GetClusterInfoRequest
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.properties import read_properties
from ferry.runtime.security.config import SECURITY_KEYS, SecurityConfig
from ferry.runtime.security.curve import internal_client

LOOPBACK_ANY = "tcp://127.0.0.1:0"  # a free port on loopback, for wiring a cluster's own services
MODULES = {
    "namesrv": "ferry.namesrv",
    "broker-store": "ferry.store",
    "broker-remoting": "ferry.remoting",
    "index": "ferry.index",
    "ha-replicator": "ferry.ha",
    "console": "ferry.console",
    "scheduler": "ferry.scheduler",
    "checkback": "ferry.scheduler.checkback",
    "controller": "ferry.controller",
    # controller mode's broker side, a process of each `ferry serve broker` tree
    "broker-agent": "ferry.controller.agent",
    # a whole broker group as one process tree (`ferry serve broker`): a replica of controller
    # mode, whose loss models a lost machine; started with ["serve", "broker", …]
    "broker": "ferry.cli",
}

LineSink = Callable[[str, str], None]


class LineRelay:
    """One writer for the lines of several services and of the command that started them
    (`ferry dev up`, `ferry serve broker`): whole lines under one lock, so lines of different
    services never merge mid-line, each prefixed with its service's name.

    A service's own `READY <name> k=v…` line is relayed as `[<name>] listening k=v…`: the word
    READY is left to the command's own line (the cluster's), so that `grep READY` finds that
    one, printed once everything is up, and not a service's, seconds earlier."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def service_line(self, name: str, line: str) -> None:
        """A LineSink: one line a service printed (`READY <its name> k=v…` once)."""
        if line.startswith("READY "):
            line = "listening " + line.split(" ", 2)[-1] if line.count(" ") > 1 else "listening"
        self.write(f"[{name}] {line.replace('READY', 'ready')}")

    def write(self, line: str) -> None:
        """One line of the command's own."""
        stream = self._stream or sys.stdout
        with self._lock:
            stream.write(line + "\n")
            stream.flush()


class LaunchError(FerryError):
    """A service that exited or stayed silent before printing READY."""

    exit_code: int | None = None  # the service's, when it exited (it said why on stderr)


@dataclass
class ServiceProcess:
    name: str
    proc: subprocess.Popen[str]
    endpoints: dict[str, str] = field(default_factory=dict)
    output: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=400))
    pump: threading.Thread | None = None
    # how it was started, so that a supervisor can start it again the same way
    args: list[str] = field(default_factory=list)
    env: Mapping[str, str] | None = None
    sink: LineSink | None = None
    stderr: int | None = subprocess.STDOUT
    label: str = ""  # its name in the output when it differs (the slave group's)
    announced: bool = False  # printed its READY line
    ready: threading.Event = field(default_factory=threading.Event)  # READY or EOF

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def display(self) -> str:
        return self.label or self.name

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM, without waiting (stop() then waits): several processes stop together."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited within timeout; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close_output()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: the crash that recovery must survive."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._close_output()

    def _close_output(self) -> None:
        # The reader thread ends at EOF once the process is gone; then the pipe can be closed.
        if self.pump is not None and self.pump is not threading.current_thread():
            self.pump.join(5)
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            self.proc.stdout.close()

    def recent_output(self) -> str:
        return "\n".join(self.output)


def start_service(
    name: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 30.0,
    sink: LineSink | None = None,
    stderr: int | None = subprocess.STDOUT,
) -> ServiceProcess:
    """Starts a service and waits for its READY line (LaunchError if it exits or stays
    silent). stderr=None leaves its stderr on ours instead of merging it into its output."""
    sp = spawn_service(name, args, env=env, sink=sink, stderr=stderr)
    wait_ready(sp, ready_timeout)
    return sp


def spawn_service(
    name: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    sink: LineSink | None = None,
    stderr: int | None = subprocess.STDOUT,
) -> ServiceProcess:
    """Starts a service without waiting: its output is read by a thread, which sets
    `announced` (and fills `endpoints`) at its READY line."""
    module = MODULES.get(name)
    if module is None:
        raise LaunchError(f"unknown service {name!r}; known: {', '.join(sorted(MODULES))}")
    child_env = dict(os.environ if env is None else env)
    child_env["FERRY_PARENT_PID"] = str(os.getpid())
    child_env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        text=True,
        env=child_env,
        bufsize=1,
    )
    sp = ServiceProcess(name, proc, args=list(args), env=env, sink=sink, stderr=stderr)

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            sp.output.append(line)
            if not sp.announced and line.startswith(f"READY {name}"):
                for part in line.split()[2:]:
                    key, _, value = part.partition("=")
                    sp.endpoints[key] = value
                sp.announced = True
                sp.ready.set()
            if sink is not None:
                sink(name, line)
        sp.ready.set()  # EOF: wake the waiter, who sees the process gone

    sp.pump = threading.Thread(target=pump, name=f"pump-{name}", daemon=True)
    sp.pump.start()
    return sp


def wait_ready(sp: ServiceProcess, ready_timeout: float = 30.0) -> None:
    """Waits for sp's READY line; kills it and raises LaunchError if it exits first or
    stays silent past ready_timeout."""
    deadline = time.monotonic() + ready_timeout
    while not sp.ready.wait(0.05):
        if time.monotonic() > deadline:
            sp.kill()
            raise LaunchError(
                f"{sp.name} printed no READY line in {ready_timeout:.0f}s:\n{sp.recent_output()}"
            )
    if not sp.announced:
        sp.proc.wait(5)
        sp._close_output()
        err = LaunchError(
            f"{sp.name} exited with {sp.proc.returncode} before READY:\n{sp.recent_output()}"
        )
        err.exit_code = sp.proc.returncode
        raise err


def service_args(conf_file: str | None, overrides: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    if conf_file:
        args += ["-c", conf_file]
    for key, value in overrides.items():
        args += ["--set", f"{key}={value}"]
    return args


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
) -> LocalCluster:
    """The embedded default of `ferry dev up`: a name server and a broker group, and the
    console when console_port is given (0: any free port). With the console, every broker
    service exports its spans to the console's /v1/traces unless OTEL_* variables say
    where they go. store_endpoint: where the master's store listens for its own services
    (bench/store_endpoint.py compares ipc:// with TCP)."""
    cluster = LocalCluster()
    try:
        namesrv_settings = {
            **security_keys(conf_file, overrides),
            "listenPort": str(namesrv_port),
        }
        namesrv = spawn_service("namesrv", service_args(None, namesrv_settings), env=env, sink=sink)
        cluster.processes.append(namesrv)

        def namesrv_ready() -> str:
            wait_ready(namesrv)
            cluster.namesrv_addr = namesrv.endpoints["addr"]
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
    except BaseException:
        cluster.stop()
        raise
    return cluster


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
