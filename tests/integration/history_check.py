"""The failover history checker's half that needs no cluster (as Jepsen's checker): plain
data in (every send, ack, delivery, fault, controller sample and final log), findings out.
Four invariants: nothing acknowledged is lost, nothing delivered is a phantom, no (queue,
offset) holds two bodies, and no two masters acknowledge at once. history_support records a
History on a live group."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

OK, FAILED, TIMEOUT = "ok", "failed", "timeout"
GROUPS = ("push", "slave-pull")
SHOWN = 10  # offending messages quoted per violation kind


@dataclass(frozen=True)
class Send:
    """One producer.send(): when it began and ended (time.monotonic()), its outcome, and for
    an answer the queue, offset and the store host of its offset message id (the replica)."""

    producer: str
    body: bytes
    started: float
    finished: float
    outcome: str  # OK (SEND_OK), FAILED (an error, or another status), TIMEOUT
    error: str = ""  # the error's type, or the status other than SEND_OK
    queue_id: int = -1
    queue_offset: int = -1
    addr: str = ""


@dataclass(frozen=True)
class Delivery:
    group: str
    body: bytes
    queue_id: int
    queue_offset: int
    at: float
    store_host: str  # the replica that stored it (stamped in the record)
    read_from: str = ""  # the address it was pulled from (the slave group's)


@dataclass(frozen=True)
class Entry:
    """One record of a replica's final log."""

    replica: int
    queue_id: int
    queue_offset: int
    body: bytes
    store_host: str


@dataclass(frozen=True)
class Fault:
    """One nemesis: injected at `at`, healed (restarted, resumed) at `healed`."""

    kind: str
    target: str  # "replica 2", "etcd", "namesrv"
    at: float
    healed: float
    hold_s: float
    replica: int = 0  # the replica faulted, if any


@dataclass(frozen=True)
class Sample:
    """The controller's state of the group and the name server's id-0 address, ~every 100 ms."""

    at: float
    epoch: int  # -1: the controller did not answer
    master_id: int
    in_sync: tuple[int, ...] = ()
    routed: str = ""


@dataclass(frozen=True)
class Era:
    """A master as the controller named it, from `start`: the time of the last sample that
    still showed the one before (the change came after it)."""

    epoch: int
    master_id: int
    start: float


@dataclass
class History:
    seed: int = 0
    started: float = 0.0
    ended: float = 0.0
    sends: list[Send] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    addrs: dict[str, int] = field(default_factory=dict)  # every address a replica had
    logs: dict[int, list[Entry]] = field(default_factory=dict)  # replica id -> final log
    master: int = 0  # the controller's master at the end, whose log is the final one
    notes: list[str] = field(default_factory=list)  # settle deadlines missed, logs unread

    # ---- the checks ----

    def acks(self) -> list[Send]:
        return [s for s in self.sends if s.outcome == OK]

    def final_bodies(self) -> set[bytes]:
        return {e.body for e in self.logs.get(self.master, [])}

    def delivered(self, group: str) -> set[bytes]:
        return {d.body for d in self.deliveries if d.group == group}

    def lost(self, group: str) -> list[Send]:
        """Acknowledged, never delivered to `group`."""
        got = self.delivered(group)
        return [s for s in self.acks() if s.body not in got]

    def not_in_log(self) -> list[Send]:
        """Acknowledged, not in the final master's log."""
        final = self.final_bodies()
        return [s for s in self.acks() if s.body not in final]

    def phantoms(self, group: str) -> list[Delivery]:
        """Delivered to `group`, in no replica's final log."""
        kept = {e.body for log in self.logs.values() for e in log}
        return [d for d in self.deliveries if d.group == group and d.body not in kept]

    def duplicates(self, group: str) -> int:
        bodies = [d.body for d in self.deliveries if d.group == group]
        return len(bodies) - len(set(bodies))

    def conflicts(self) -> dict[tuple[int, int], dict[bytes, set[str]]]:
        """(queue, offset) -> body -> who said so, where more than one body was said."""
        seen: dict[tuple[int, int], dict[bytes, set[str]]] = defaultdict(lambda: defaultdict(set))
        for s in self.acks():
            seen[s.queue_id, s.queue_offset][s.body].add(f"ack by {self.replica_of(s.addr)}")
        for d in self.deliveries:
            where = f" from {self.replica_of(d.read_from)}" if d.read_from else ""
            seen[d.queue_id, d.queue_offset][d.body].add(f"{d.group}{where}")
        for replica, log in self.logs.items():
            for e in log:
                seen[e.queue_id, e.queue_offset][e.body].add(f"log of replica {replica}")
        return {where: dict(bodies) for where, bodies in seen.items() if len(bodies) > 1}

    def eras(self) -> list[Era]:
        out: list[Era] = []
        last_at = float("-inf")
        for s in self.samples:
            if s.epoch < 0:
                continue  # no answer: the change may have come before it
            if not out or (out[-1].epoch, out[-1].master_id) != (s.epoch, s.master_id):
                out.append(Era(s.epoch, s.master_id, last_at))
            last_at = s.at
        return [e for e in out if e.master_id > 0]

    def double_masters(self) -> list[str]:
        """Acks of an old master for sends begun after a newer master's first ack arrived
        (begun after: the old master's answer then surely came after the newer one's), and acks
        of a replica the controller had not named master."""
        eras = self.eras()
        acks = sorted(self.acks(), key=lambda s: s.finished)
        first: list[Send | None] = []
        for era in eras:
            first.append(
                next(
                    (
                        a
                        for a in acks
                        if self.addrs.get(a.addr) == era.master_id and a.finished >= era.start
                    ),
                    None,
                )
            )
        out: list[str] = []
        for ack in acks:
            replica = self.addrs.get(ack.addr, 0)
            mine = [
                i for i, e in enumerate(eras) if e.master_id == replica and e.start <= ack.finished
            ]
            if not mine:
                out.append(f"{self.show_send(ack)}: the controller had not named it master")
                continue
            for i in range(mine[-1] + 1, len(eras)):
                newer = first[i]
                if newer is not None and newer.finished < ack.started:
                    out.append(
                        f"{self.show_send(ack)}, sent {self.t(ack.started)}, after replica "
                        f"{eras[i].master_id} (epoch {eras[i].epoch}) acked {newer.body!r} "
                        f"at {self.t(newer.finished)}"
                    )
                    break
        return out

    def failover_times(self) -> list[tuple[Fault, float | None]]:
        """Each fault with the time to the first ack of a send begun after it."""
        acks = sorted(self.acks(), key=lambda s: s.started)
        starts = [a.started for a in acks]
        out: list[tuple[Fault, float | None]] = []
        for fault in self.faults:
            later = acks[bisect.bisect_left(starts, fault.at) :]
            ends = [a.finished for a in later]
            out.append((fault, min(ends) - fault.at if ends else None))
        return out

    # ---- reporting ----

    def t(self, at: float) -> str:
        return f"t={at - self.started:.2f}s"

    def replica_of(self, addr: str) -> str:
        replica = self.addrs.get(addr)
        return f"replica {replica}" if replica else addr or "?"

    def fault_before(self, at: float) -> str:
        before = [f for f in self.faults if f.at <= at]
        if not before:
            return "before any fault"
        f = before[-1]
        return f"after {f.kind} of {f.target} at {self.t(f.at)}"

    def show_send(self, s: Send) -> str:
        return (
            f"{s.body!r} acked by {self.replica_of(s.addr)} as q{s.queue_id}:{s.queue_offset} "
            f"at {self.t(s.finished)} ({self.fault_before(s.finished)})"
        )

    def where_logged(self, body: bytes) -> str:
        places = [
            f"replica {e.replica} q{e.queue_id}:{e.queue_offset}"
            for log in self.logs.values()
            for e in log
            if e.body == body
        ]
        return ", ".join(places) or "in no replica's log"

    def violations(self) -> list[str]:
        """Every broken invariant, a line each (the first SHOWN of a kind), with the offending
        messages: their queue, offset, bodies and which replica or fault they belong to."""
        out: list[str] = []

        def add(kind: str, lines: list[str]) -> None:
            if lines:
                out.append(f"{kind}: {len(lines)}")
                out.extend(f"  {line}" for line in lines[:SHOWN])

        for group in GROUPS:
            add(f"lost to {group}", [self.show_send(s) for s in self.lost(group)])
        add(
            f"acknowledged, not in the final log (master replica {self.master})",
            [
                f"{self.show_send(s)}; logged: {self.where_logged(s.body)}"
                for s in self.not_in_log()
            ],
        )
        for group in GROUPS:
            add(
                f"phantom deliveries to {group}",
                [
                    f"{d.body!r} as q{d.queue_id}:{d.queue_offset} stored by "
                    f"{self.replica_of(d.store_host)}"
                    + (f" read from {self.replica_of(d.read_from)}" if d.read_from else "")
                    + f" at {self.t(d.at)} ({self.fault_before(d.at)})"
                    for d in self.phantoms(group)
                ],
            )
        add(
            "offset conflicts",
            [
                f"q{q}:{o}: "
                + "; ".join(
                    f"{b!r} [{', '.join(sorted(who))}]" for b, who in sorted(bodies.items())
                )
                for (q, o), bodies in sorted(self.conflicts().items())
            ],
        )
        add("double masters", self.double_masters())
        add("unsettled", list(self.notes))
        return out

    def figures(self) -> dict[str, Any]:
        failed = Counter(s.error for s in self.sends if s.outcome == FAILED)
        timed_out = Counter(s.error for s in self.sends if s.outcome == TIMEOUT)
        figures: dict[str, Any] = {
            "seed": self.seed,
            "duration": f"{self.ended - self.started:.1f} s",
            "faults": dict(Counter(f.kind for f in self.faults)),
            "sends": len(self.sends),
            "of which sent to a paused master": sum(
                1 for s in self.sends if s.producer[:4] == "slow"
            ),
            "acknowledged": len(self.acks()),
            "failed": dict(failed) or 0,
            "timed out": sum(timed_out.values()),
            "final log": f"{len(self.logs.get(self.master, []))} records (replica {self.master})",
        }
        for group in GROUPS:
            figures[f"delivered to {group}"] = len(self.delivered(group))
        for group in GROUPS:
            figures[f"lost to {group}"] = len(self.lost(group))
        figures["acked, not in the final log"] = len(self.not_in_log())
        for group in GROUPS:
            figures[f"phantom in {group}"] = len(self.phantoms(group))
        for group in GROUPS:
            figures[f"duplicates in {group}"] = self.duplicates(group)
        figures["offset conflicts"] = len(self.conflicts())
        figures["double-master violations"] = len(self.double_masters())
        figures["unsettled steps"] = len(self.notes)
        figures["masters (controller)"] = ", ".join(
            f"{e.master_id} from {self.t(e.start) if e.start > self.started else 'the start'}"
            for e in self.eras()
        )
        return figures

    def report(self) -> str:
        """The figures as a two-column table, then each fault and its failover time."""
        rows = [(name, str(value)) for name, value in self.figures().items()]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows]
        lines.append("")
        lines.append(f"{'#':>3}  {'fault':<16}{'target':<11}{'at':>9}{'hold':>8}  writes back")
        for i, (fault, took) in enumerate(self.failover_times(), 1):
            back = f"{took:.2f} s" if took is not None else "never"
            lines.append(
                f"{i:>3}  {fault.kind:<16}{fault.target:<11}{fault.at - self.started:>8.1f}s"
                f"{fault.hold_s:>7.1f}s  {back}"
            )
        return "\n".join(lines)

    def assert_ok(self) -> None:
        problems = self.violations()
        assert not problems, "\n".join([self.report(), "", *problems])
