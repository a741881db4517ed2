"""Fixtures for the end-to-end tests: deploy/docker-compose.yml started for real.

The stack runs as its own compose project on free ports, with the image that
deploy/build_images.py keeps current (`make images` makes the base and downloads the wheels
once; here it only rebuilds Ferry's layer if the code changed). Everything the project
created (containers, network, volumes) is removed afterwards, also when a test fails; stacks
left by an earlier run that was killed are removed at the start.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from itest_support import Cluster, start_cluster, wait_for

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "deploy" / "docker-compose.yml"
HOST_COMPOSE_FILE = ROOT / "deploy" / "docker-compose.host.yml"  # one host of several
BUILD_SCRIPT = ROOT / "deploy" / "build_images.py"
E2E_CONF = Path(__file__).resolve().parent / "broker-e2e.conf"
HA_CONF = Path(__file__).resolve().parent / "broker-e2e-ha.conf"
PROJECT_PREFIX = "ferry-e2e-"
# A loopback address other than the default, to show that clients follow BROKER_IP1.
ADVERTISED_HOST = "127.0.0.2"
SERVICES = (
    "namesrv",
    "proxy",
    "broker-store",
    "broker-index",
    "broker-scheduler",
    "broker-checkback",
    "broker-remoting",
    "console",
    "broker-ha",
)
SLAVE_SERVICES = (
    "broker-s-store",
    "broker-s-index",
    "broker-s-scheduler",
    "broker-s-checkback",
    "broker-s-ha",
    "broker-s-remoting",
)


# `--profile ha` (+ `broker-b`): named on the command line, since the default broker-a
# services must not start beside the controller-mode broker-a
HA_SERVICES = (
    "namesrv",
    "etcd",
    "controller",
    "broker-a-1",
    "broker-a-2",
    "broker-a-3",
    "broker-b",
)
# `--profile secure`: named on the command line too (the one-shot secure-keys service starts as
# their dependency and is not waited on for health: it exits once the keys are there)
SECURE_SERVICES = ("secure-namesrv", "secure-broker", "secure-console")


def _run(args: list[str], timeout: float = 120.0, env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"`{' '.join(args)}` failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def _pair(line: str) -> tuple[str, str]:
    key, _, value = line.strip().partition(" ")
    return key, value


def docker_problem() -> str:
    """'' when a Docker engine answers, else why the e2e tests cannot run."""
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    try:
        done = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer within 20 s"
    if done.returncode != 0 or not done.stdout.strip():
        return f"no Docker engine answers: {done.stderr.strip()}"
    return ""


def compose_command() -> list[str]:
    """Compose v2 (`docker compose`) where installed, else Debian's docker-compose v1."""
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    if probe.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("a Docker engine answers but neither `docker compose` nor docker-compose exists")


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class ComposeStack:
    """One compose project of deploy/docker-compose.yml, driven through the compose CLI."""

    compose: list[str]
    project: str
    settings: dict[str, str]
    profiles: tuple[str, ...] = ()
    only: tuple[str, ...] = ()  # the services `up` starts, when not every default one
    file: Path = COMPOSE_FILE
    env: dict[str, str] = field(init=False)

    @property
    def services(self) -> tuple[str, ...]:
        if self.only:
            return self.only
        return SERVICES + (SLAVE_SERVICES if "slave" in self.profiles else ())

    def __post_init__(self) -> None:
        self.env = {**os.environ, **self.settings}

    @property
    def namesrv(self) -> str:
        """Ferry's own name server port, for the SDK, CLI and console."""
        return f"{self.settings['PUBLISH_HOST']}:{self.settings['NATIVE_NAMESRV_PORT']}"

    @property
    def rocketmq_namesrv(self) -> str:
        """The name server's RocketMQ-protocol port (9876 by default), for RocketMQ's clients."""
        return f"{self.settings['PUBLISH_HOST']}:{self.settings['NAMESRV_PORT']}"

    @property
    def console_url(self) -> str:
        return f"http://{self.settings['PUBLISH_HOST']}:{self.settings['CONSOLE_PORT']}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.settings['PUBLISH_HOST']}:{self.settings['METRICS_PORT']}/metrics"

    @property
    def proxy_endpoint(self) -> str:
        """The gRPC proxy, RocketMQ 5's clients' endpoint (8081 by default)."""
        return f"{self.settings['PUBLISH_HOST']}:{self.settings['PROXY_PORT']}"

    @property
    def broker_addr(self) -> str:
        """broker-a's own port, as Ferry's routes name it."""
        return f"{self.settings['BROKER_IP1']}:{self.settings['NATIVE_BROKER_PORT']}"

    @property
    def rocketmq_broker_addr(self) -> str:
        """broker-a's RocketMQ-protocol port, as the routes given to RocketMQ clients name it."""
        return f"{self.settings['BROKER_IP1']}:{self.settings['BROKER_PORT']}"

    def run(self, *args: str, timeout: float = 120.0) -> str:
        profiles = [arg for profile in self.profiles for arg in ("--profile", profile)]
        command = [*self.compose, "-p", self.project, "-f", str(self.file), *profiles, *args]
        return _run(command, timeout, self.env)

    def up(self) -> None:
        """Starts (or re-creates) every service and waits until all of them are healthy."""
        self.run("up", "-d", *self.only)
        self.wait_healthy()

    def down(self, volumes: bool) -> None:
        self.run("down", "--remove-orphans", "--timeout", "10", *(["-v"] if volumes else []))

    def containers(self) -> dict[str, str]:
        """Service name -> container id, stopped containers included."""
        listed = _run(
            ["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project={self.project}",
             "--format", '{{.Label "com.docker.compose.service"}} {{.ID}}'],
        )  # fmt: skip
        return dict(_pair(line) for line in listed.splitlines() if line.strip())

    def container(self, service: str) -> str:
        cid = self.containers().get(service)
        if cid is None:
            pytest.fail(f"no container for {service} in {self.project}")
        return cid

    def kill(self, service: str) -> None:
        """SIGKILL to the service's container, which stays stopped (a container killed through
        Docker is not restarted by its restart policy)."""
        _run(["docker", "kill", "--signal", "KILL", self.container(service)])

    def start(self, service: str) -> None:
        """Starts the same container again (same volumes) and waits for the stack's health."""
        _run(["docker", "start", self.container(service)])
        self.wait_healthy()

    def health(self) -> dict[str, str]:
        """Service -> healthy, starting, unhealthy, or the state of a stopped container."""
        ids = self.containers()
        out = dict.fromkeys(self.services, "missing")
        if ids:
            template = (
                '{{index .Config.Labels "com.docker.compose.service"}} '
                "{{if .State.Running}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}"
            )
            listed = _run(["docker", "inspect", "--format", template, *ids.values()])
            states = dict(_pair(line) for line in listed.splitlines() if line.strip())
            # the services waited on; not a one-shot one they depend on (secure-keys)
            out.update((name, state) for name, state in states.items() if name in out)
        return out

    def wait_healthy(self, timeout: float = 90.0) -> None:
        last: dict[str, str] = {}

        def all_healthy() -> bool:
            last.update(self.health())
            return all(state == "healthy" for state in last.values())

        try:
            wait_for(all_healthy, timeout, "every container to be healthy")
        except pytest.fail.Exception:
            pytest.fail(f"not healthy: {last}\n{self.logs()}")

    def logs(self, service: str = "") -> str:
        done = subprocess.run(
            [*self.compose, "-p", self.project, "-f", str(self.file)]
            + [arg for profile in self.profiles for arg in ("--profile", profile)]
            + ["logs", "--no-color"]
            + ([service] if service else []),
            capture_output=True,
            text=True,
            timeout=60,
            env=self.env,
            check=False,
        )
        return done.stdout[-6000:]


def remove_abandoned_stacks(compose: list[str]) -> None:
    """Stacks whose pytest process is gone (killed before its teardown ran)."""
    listed = _run(
        ["docker", "ps", "-a", "--filter", "label=com.docker.compose.project",
         "--format", '{{.Label "com.docker.compose.project"}}'],
    )  # fmt: skip
    for project in sorted(set(listed.split())):
        if not project.startswith(PROJECT_PREFIX):
            continue
        pid = project[len(PROJECT_PREFIX) :].split("-")[0]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        for file in (COMPOSE_FILE, HOST_COMPOSE_FILE):  # whichever the project came from
            subprocess.run(
                [*compose, "-p", project, "-f", str(file), "down", "-v", "-t", "1",
                 "--remove-orphans"],
                capture_output=True,
                timeout=120,
                env={**os.environ, "HOST_IP": "127.0.0.1"},  # the host file needs one
                check=False,
            )  # fmt: skip


@pytest.fixture(scope="session")
def docker_engine() -> None:
    problem = docker_problem()
    if problem:
        message = f"e2e tests need a Docker engine: {problem}"
        if os.environ.get("CI"):
            # as the browser and C-extension tests do: under CI a dead engine fails the run
            # instead of turning the Docker tier into skips that a green run hides
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def ferry_image(docker_engine: None) -> str:
    """Brings the image up to date from the cached base and wheels (a few seconds when only
    Ferry's code changed); fails, asking for `make images`, when those are not there yet."""
    done = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), "--offline"],
        capture_output=True,
        text=True,
        timeout=900,  # a rebuild of Ferry's layer takes minutes on a loaded machine
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"the Ferry image is not ready:\n{done.stdout}{done.stderr}")
    return os.environ.get("FERRY_IMAGE", "ferry:latest")


def open_stack(
    ferry_image: str,
    conf: Path = E2E_CONF,
    profiles: tuple[str, ...] = (),
    only: tuple[str, ...] = (),
    extra: Mapping[str, str] | None = None,
) -> ComposeStack:
    """A new compose project on free ports (not started yet); `extra`: more variables."""
    compose = compose_command()
    remove_abandoned_stacks(compose)
    settings = {
        "FERRY_IMAGE": ferry_image,
        "BROKER_IP1": ADVERTISED_HOST,
        "PUBLISH_HOST": ADVERTISED_HOST,
        "BROKER_PORT": str(free_port(ADVERTISED_HOST)),
        "NATIVE_BROKER_PORT": str(free_port(ADVERTISED_HOST)),
        "SLAVE_BROKER_PORT": str(free_port(ADVERTISED_HOST)),
        "NATIVE_SLAVE_BROKER_PORT": str(free_port(ADVERTISED_HOST)),
        "NAMESRV_PORT": str(free_port(ADVERTISED_HOST)),
        "NATIVE_NAMESRV_PORT": str(free_port(ADVERTISED_HOST)),
        "CONSOLE_PORT": str(free_port(ADVERTISED_HOST)),
        "PROXY_PORT": str(free_port(ADVERTISED_HOST)),
        "METRICS_PORT": str(free_port(ADVERTISED_HOST)),
        "CONTROLLER_PORT": str(free_port(ADVERTISED_HOST)),
        "BROKER_B_PORT": str(free_port(ADVERTISED_HOST)),
        "NATIVE_BROKER_B_PORT": str(free_port(ADVERTISED_HOST)),
        "BROKER_CONF": str(conf),
        **(extra or {}),
    }
    project = f"{PROJECT_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:6]}"
    return ComposeStack(compose, project, settings, profiles, only)


@pytest.fixture(scope="module")
def stack(ferry_image: str) -> Iterator[ComposeStack]:
    s = open_stack(ferry_image)
    try:
        s.up()
        yield s
    finally:
        s.down(volumes=True)


@pytest.fixture(scope="module")
def ha_stack(ferry_image: str) -> Iterator[ComposeStack]:
    """A SYNC_MASTER broker group and its slave group (`--profile slave`)."""
    s = open_stack(ferry_image, conf=HA_CONF, profiles=("slave",))
    try:
        s.up()
        yield s
    finally:
        s.down(volumes=True)


@pytest.fixture(scope="module")
def controller_stack(ferry_image: str) -> Iterator[ComposeStack]:
    """`--profile ha --profile broker-b`: etcd, the controller, broker-a as three
    controller-mode replicas (deploy/broker-ha.conf) and broker-b, one container each."""
    s = open_stack(ferry_image, profiles=("ha", "broker-b"), only=HA_SERVICES)
    try:
        s.up()
        yield s
    finally:
        s.down(volumes=True)


def secure_secrets() -> dict[str, str]:
    """The secure profile's SECURE_* variables, fresh for each run (not the placeholders)."""
    return {
        "SECURE_INNER_ACCESS_KEY": "e2e-inner",
        "SECURE_INNER_SECRET_KEY": secrets.token_hex(16),
        "SECURE_ROOT_USER": "e2e-root",
        "SECURE_ROOT_PASSWORD": secrets.token_hex(16),
        "SECURE_OTLP_TOKEN": secrets.token_hex(16),
    }


@pytest.fixture(scope="module")
def secure_stack(ferry_image: str) -> Iterator[ComposeStack]:
    """`--profile secure`: the name server, broker-a (one `ferry serve broker` container) and
    the console, with authentication, authorization and CURVE on (deploy/broker-secure.conf)."""
    s = open_stack(ferry_image, profiles=("secure",), only=SECURE_SERVICES, extra=secure_secrets())
    try:
        s.up()
        yield s
    finally:
        s.down(volumes=True)


# ---- deploy/docker-compose.host.yml as three hosts on this machine ---------------------------

HOSTS = ("127.0.0.21", "127.0.0.22", "127.0.0.23")
FIRST_HOST = ("namesrv", "etcd", "controller", "broker-a")
PORT_KEYS = (
    "NAMESRV_PORT",
    "NATIVE_NAMESRV_PORT",
    "CONTROLLER_PORT",
    "ETCD_CLIENT_PORT",
    "ETCD_PEER_PORT",
    "BROKER_A_PORT",
    "NATIVE_BROKER_A_PORT",
    "BROKER_A_HA_PORT",
)


def port_free_on_every_host() -> int:
    """A port no process binds on any of the hosts' addresses (host networking: the
    containers bind them on this machine)."""
    while True:
        with socket.socket() as probe:
            probe.bind((HOSTS[0], 0))
            port = int(probe.getsockname()[1])
        try:
            for host in HOSTS[1:]:
                with socket.socket() as other:
                    other.bind((host, port))
        except OSError:
            continue
        return port


def host_settings(image: str) -> dict[str, str]:
    """What every host's environment shares: the image, the ports, every peer's address."""
    chosen: set[int] = set()
    while len(chosen) < len(PORT_KEYS):
        chosen.add(port_free_on_every_host())
    ports = {key: str(port) for key, port in zip(PORT_KEYS, sorted(chosen), strict=True)}
    first = HOSTS[0]
    return {
        "FERRY_IMAGE": image,
        **ports,
        "NAMESRV_ADDR": f"{first}:{ports['NATIVE_NAMESRV_PORT']}",
        "CONTROLLER_ADDR": f"{first}:{ports['CONTROLLER_PORT']}",
        "ETCD_ENDPOINTS": f"http://{first}:{ports['ETCD_CLIENT_PORT']}",
        "ETCD_NAME": "etcd-1",
        "ETCD_INITIAL_CLUSTER": f"etcd-1=http://{first}:{ports['ETCD_PEER_PORT']}",
    }


@pytest.fixture(scope="module")
def hosts(ferry_image: str) -> Iterator[list[ComposeStack]]:
    """Three hosts of deploy/docker-compose.host.yml: the first runs the name server, etcd,
    the controller and broker-a's replica 1, the others replicas 2 and 3."""
    compose = compose_command()
    remove_abandoned_stacks(compose)
    shared = host_settings(ferry_image)
    run_id = f"{PROJECT_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:6]}"
    stacks = []
    for index, host_ip in enumerate(HOSTS, start=1):
        services = FIRST_HOST if index == 1 else ("broker-a",)
        settings = {**shared, "HOST_IP": host_ip, "BROKER_A_ID": str(index)}
        stacks.append(
            ComposeStack(
                compose,
                f"{run_id}-h{index}",
                settings,
                profiles=services,
                only=services,
                file=HOST_COMPOSE_FILE,
            )
        )
    try:
        for stack in stacks:  # the first host's name server, etcd and controller first
            stack.run("up", "-d", *stack.only)
        for stack in stacks:
            stack.wait_healthy(120)
        yield stacks
    finally:
        for stack in reversed(stacks):
            stack.down(volumes=True)


@pytest.fixture
def running(stack: ComposeStack) -> ComposeStack:
    """The module's stack, with every service up again if an earlier test left one stopped."""
    if any(state != "healthy" for state in stack.health().values()):
        stack.up()
    return stack


@pytest.fixture
def local_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A name server and broker group as local processes (as in tests/integration)."""
    cluster = start_cluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.local.stop()
