"""Restarts the services of `ferry serve` and `ferry dev up` that exit unexpectedly, so that
one crash stays in the process that had it.

Like compose's `restart: unless-stopped`: any exit the supervisor did not ask for is restarted,
after a wait that starts at 0.5 s and doubles up to 30 s, and goes back to 0.5 s once the
service has served for a minute. A service that exits 5 times within 2 minutes is given up
on, with one error line; the others keep serving (degraded). A restarted service gets the
arguments of its first start, with every endpoint pinned to what that first start bound:
a port given as 0 would otherwise be a new port, and its peers would wait at the old one.

FERRY_RESTART_POLICY (`first_wait=0.05,max_wait=1,stable_after=60,max_crashes=5,window=120,
ready_timeout=300`, seconds; any subset) changes the numbers, for tests and for operators;
`off` turns restarts off (where something else restarts the command: a container's restart
policy), and then the first exit stops them all.
"""

from __future__ import annotations

import collections
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace

from ferry.protocol.errors import ConfigError
from ferry.runtime.launcher import LocalCluster, ServiceProcess, spawn_service

FIRST_WAIT_S = 0.5
MAX_WAIT_S = 30.0
STABLE_AFTER_S = 60.0  # served this long: the next crash waits FIRST_WAIT_S again
MAX_CRASHES = 5  # this many exits within WINDOW_S: given up on
WINDOW_S = 120.0
READY_TIMEOUT_S = 300.0  # a store recovering a large log after kill -9 takes a while
POLICY_ENV = "FERRY_RESTART_POLICY"
TICK_S = 0.05  # how often the supervisor looks at its processes

# READY field -> the option that binds it again on a restart (port-only where the service
# takes a port, not an endpoint)
_PINS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "namesrv": (("addr", "--set listenPort", True),),
    "console": (("addr", "--port", True),),
    "broker-store": (
        ("endpoint", "--set storeEndpoint", False),
        ("feed", "--set storeFeedEndpoint", False),
    ),
    "index": (("endpoint", "--set indexEndpoint", False),),
    "scheduler": (("endpoint", "--set schedulerEndpoint", False),),
    "broker": (("addr", "--set listenPort", True), ("ha", "--set haListenPort", True)),
    "checkback": (("endpoint", "--set checkbackEndpoint", False),),
    "ha-replicator": (("endpoint", "--set haListenPort", True),),
    "broker-remoting": (
        ("addr", "--set listenPort", True),
        ("metrics", "--set metricsPromExporterPort", True),
    ),
    "proxy": (
        ("grpc", "--set proxyListenPort", True),
        ("metrics", "--set metricsPromExporterPort", True),
    ),
    # broker-agent: no port (the tree's channel is the supervisor's, passed in its env)
}


@dataclass(frozen=True)
class RestartPolicy:
    first_wait: float = FIRST_WAIT_S
    max_wait: float = MAX_WAIT_S
    stable_after: float = STABLE_AFTER_S
    max_crashes: int = MAX_CRASHES
    window: float = WINDOW_S
    ready_timeout: float = READY_TIMEOUT_S
    restart: bool = True  # False (FERRY_RESTART_POLICY=off): any exit stops them all

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RestartPolicy:
        """The defaults, changed by FERRY_RESTART_POLICY's `key=seconds,…`, or `off`."""
        text = (os.environ if env is None else env).get(POLICY_ENV, "").strip()
        if not text:
            return cls()
        if text == "off":
            return cls(restart=False)
        types = {
            f.name: int if f.name == "max_crashes" else float
            for f in fields(cls)
            if f.name != "restart"
        }
        changes: dict[str, float | int] = {}
        for item in text.split(","):
            key, _, value = item.strip().partition("=")
            if key not in types:
                raise ConfigError(f"{POLICY_ENV}: unknown key {key!r}; known: {', '.join(types)}")
            try:
                changes[key] = types[key](value)
            except ValueError:
                raise ConfigError(f"{POLICY_ENV}: {key}={value!r} is not a number") from None
        return replace(cls(), **changes)  # type: ignore[arg-type]


def exit_status(returncode: int | None) -> str:
    """`SIGKILL` or `exit code 3`, as an operator reads it."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def pinned_args(sp: ServiceProcess) -> list[str]:
    """sp's arguments with each endpoint it bound given explicitly (later options win)."""
    out = list(sp.args)
    for key, option, port_only in _PINS.get(sp.name, ()):
        value = sp.endpoints.get(key, "")
        if port_only:
            value = value.rpartition(":")[2]
            if not value.isdigit():
                continue
        elif not value:
            continue
        flag, _, setting = option.partition(" ")
        out += [flag, f"{setting}={value}"] if setting else [flag, value]
    return out


def with_settings(args: list[str], settings: Mapping[str, str]) -> list[str]:
    """args with each key of settings given by one `--set key=value` at the end (an earlier
    `--set` of the same key dropped, so the arguments do not grow at every change)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--set" and i + 1 < len(args) and args[i + 1].split("=", 1)[0] in settings:
            i += 2
            continue
        out.append(args[i])
        i += 1
    for key, value in settings.items():
        out += ["--set", f"{key}={value}"]
    return out


@dataclass
class _Watch:
    """What the supervisor knows of one slot of the cluster's process list."""

    args: list[str]
    wait: float
    crashes: collections.deque[float] = field(default_factory=collections.deque)
    up_since: float = 0.0  # when it last printed READY
    restart_at: float | None = None  # it is dead; start it again then
    starting_until: float | None = None  # restarted, not READY yet; kill it past this
    given_up: bool = False


class Supervisor:
    """Watches a started LocalCluster from the thread that runs `run`, and restarts its
    processes as the policy says. Only that thread starts processes, so a stop (run
    returns, then cluster.stop()) never races a restart."""

    def __init__(
        self,
        cluster: LocalCluster,
        *,
        policy: RestartPolicy | None = None,
        say: Callable[[str], None] = print,
        error: Callable[[str], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.policy = policy or RestartPolicy.from_env()
        self._say = say
        self._error = error or (lambda message: say("error: " + message))
        self._stop = threading.Event()
        self._halted = False  # a service exited with restarts off
        now = time.monotonic()
        self._watches = [
            _Watch(pinned_args(sp), self.policy.first_wait, up_since=now)
            for sp in cluster.processes
        ]
        self.restarts = 0
        # (service name, broker.conf keys) to restart with: reconfigure() from any thread
        self._changes: queue.SimpleQueue[tuple[str, dict[str, str]]] = queue.SimpleQueue()

    def add(self, sp: ServiceProcess) -> None:
        """Supervises sp too, a process started after the supervisor was made (the broker
        agent, which needs the supervisor's channel first). Before run() only."""
        self.cluster.processes.append(sp)
        self._watches.append(
            _Watch(pinned_args(sp), self.policy.first_wait, up_since=time.monotonic())
        )

    def reconfigure(self, name: str, settings: Mapping[str, str]) -> None:
        """Restarts every process of service `name` cleanly with `settings` added to its
        broker.conf keys, now and at any later restart (a role change in controller mode).
        Safe from any thread: the supervising thread does it at its next look."""
        self._changes.put((name, dict(settings)))

    def run(self, stop: threading.Event) -> bool:
        """Supervises until `stop` is set (True), or every service was given up on, or one
        exited with restarts off (False)."""
        self._stop = stop
        parent = os.environ.get("FERRY_PARENT_PID", "")
        while not stop.wait(TICK_S):
            if parent.isdigit() and os.getppid() != int(parent):
                return True  # the supervisor above is gone (a `ferry serve broker` tree of
                # `ferry dev up --ha`): stop, as every service does when its parent goes
            self._apply_changes()
            self.check()
            if self._halted or all(w.given_up for w in self._watches):
                return False
        return True

    def check(self, now: float | None = None) -> None:
        """One look at every process: notice deaths, start the ones whose wait is over."""
        for i, watch in enumerate(self._watches):
            if not watch.given_up:
                self._check_one(i, watch, time.monotonic() if now is None else now)

    def _check_one(self, i: int, watch: _Watch, now: float) -> None:
        sp = self.cluster.processes[i]
        if self._stop.is_set():
            return  # stopping: an exit now is the stop's (Ctrl-C reaches every child)
        if sp.alive():
            if watch.starting_until is not None:
                if sp.announced:
                    watch.starting_until = None
                    watch.up_since = now
                    self._say(f"{sp.display} is back (pid {sp.pid})")
                elif now > watch.starting_until:
                    self._say(f"{sp.display} printed no READY line in time; killing it")
                    sp.proc.kill()
            elif now - watch.up_since >= self.policy.stable_after:
                watch.wait = self.policy.first_wait
            return
        if watch.restart_at is None:
            watch.starting_until = None
            status = exit_status(sp.proc.poll())
            self._died(sp, watch, now, f"(pid {sp.pid}) exited with {status}", status)
        elif now >= watch.restart_at:
            sp.kill()  # reaps it and closes its output
            watch.restart_at = None
            try:
                new = spawn_service(sp.name, watch.args, env=sp.env, sink=sp.sink, stderr=sp.stderr)
            except OSError as exc:  # no fork (EAGAIN, ENOMEM): an exit like any other
                self._died(sp, watch, now, f"could not be started again ({exc})", str(exc))
                return
            new.label = sp.label
            self.cluster.processes[i] = new
            watch.starting_until = now + self.policy.ready_timeout
            self.restarts += 1

    def _apply_changes(self) -> None:
        """Every queued role change at once: all the processes concerned are told to stop
        together, then started together (a promotion restarts five services: one by one,
        their shutdowns and start-ups added up to seconds of a failover)."""
        changes: dict[str, dict[str, str]] = {}
        while not self._changes.empty():
            name, settings = self._changes.get()
            changes.setdefault(name, {}).update(settings)
        if not changes or self._stop.is_set():
            return
        chosen = [
            i
            for i, sp in enumerate(self.cluster.processes)
            if sp.name in changes and not self._watches[i].given_up
        ]
        for i in chosen:
            self.cluster.processes[i].terminate()  # asked for: not a crash
        for i in chosen:
            sp, watch = self.cluster.processes[i], self._watches[i]
            sp.stop()  # waits for the exit (SIGKILL after its timeout)
            settings = changes[sp.name]
            watch.args = with_settings(watch.args, settings)
            watch.restart_at = None
            new = spawn_service(sp.name, watch.args, env=sp.env, sink=sp.sink, stderr=sp.stderr)
            new.label = sp.label
            self.cluster.processes[i] = new
            watch.starting_until = time.monotonic() + self.policy.ready_timeout
            shown = " ".join(f"{k}={v}" for k, v in settings.items())
            self._say(f"{sp.display} restarting with {shown}")

    def _died(self, sp: ServiceProcess, watch: _Watch, now: float, what: str, status: str) -> None:
        """Counts an exit (`what` happened; `status` is its short form); schedules the
        restart, or gives up."""
        if not self.policy.restart:
            watch.given_up = self._halted = True
            self._error(f"{sp.display} {what}; restarts are off ({POLICY_ENV}=off): stopping")
            return
        watch.crashes.append(now)
        while watch.crashes and watch.crashes[0] < now - self.policy.window:
            watch.crashes.popleft()
        if len(watch.crashes) >= self.policy.max_crashes:
            watch.given_up = True
            sp.kill()
            self._error(
                f"{sp.display} exited {len(watch.crashes)} times within "
                f"{self.policy.window:g} s (last: {status}); not restarting it again, "
                "the other services keep serving"
            )
            return
        delay = watch.wait
        watch.wait = min(watch.wait * 2, self.policy.max_wait)
        watch.restart_at = now + delay
        self._say(f"{sp.display} {what}; restarting in {delay:g} s")
