"""Auto-renew: the receipt handles the proxy handed to push consumers (a receive with
auto_renew, which only the PushConsumer sets) are kept invisible while the client's listener
runs, as RocketMQ 5's proxy does. A push consumer never changes the invisible time of a
message it is consuming, and its receive names none (the proxy's defaultInvisibleTimeMills,
60 s): without renewal, a listener busy for longer would see the message again.

Every PERIOD_S the handles whose invisible time ends within renewAheadTimeMillis are renewed
for another defaultInvisibleTimeMills (a change of invisible time on the broker, which
replaces Ferry's handle). The client still holds the handle it was given, so an ack, a nack
(ChangeInvisibleDuration) or a forward to the DLQ with it is made with the current one
(settle()), and ends the renewal once done (a failed ack is retried by the client: it is
still renewed meanwhile). Renewal also ends when the client's Telemetry stream
closes or it stops heartbeating (CLIENT_SILENT_S), when a renewal fails (the message comes
back after its invisible time), and after renewMaxTimeMillis (3 h by default, RocketMQ's
proxy's renewMaxTimeMillis): a listener that never returns does not hold a message forever.

What is held is in the proxy's memory only: a proxy that restarts stops renewing, and the
messages come back after their invisible time (at least once, as with RocketMQ's proxy)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ferry.protocol.errors import FerryError, InvalidReceiptHandleError
from ferry.proxy import receipts
from ferry.proxy.consuming import Popper
from ferry.proxy.errors import ProxyError
from ferry.proxy.protocol import Code

log = logging.getLogger("ferry.proxy.renew")

PERIOD_S = 1.0
CLIENT_SILENT_S = 60.0  # push consumers beat every 10 s (and receive all the time)
MAX_HELD = 200_000
MAX_RENEWING = 64  # changes of invisible time in flight at once


T = TypeVar("T")
Settle = Callable[[receipts.Receipt], Awaitable[T]]


def _invalid(err: FerryError | ProxyError) -> bool:
    if isinstance(err, ProxyError):
        return err.code is Code.INVALID_RECEIPT_HANDLE
    return isinstance(err, InvalidReceiptHandleError)


@dataclass(frozen=True)
class RenewPolicy:
    invisible_ms: int  # defaultInvisibleTimeMills: each receive's and each renewal's
    ahead_ms: int  # renewAheadTimeMillis
    max_ms: int  # renewMaxTimeMillis


@dataclass
class Held:
    client_id: str
    group: str
    topic: str
    receipt: receipts.Receipt  # the one the broker holds now
    until: float  # loop time its invisible time ends
    since: float  # loop time it was received
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Renewer:
    """Held handles by (group, the receipt handle the client was given)."""

    def __init__(self, popper: Popper, policy: RenewPolicy) -> None:
        self._popper = popper
        self.policy = policy
        self._held: dict[tuple[str, str], Held] = {}
        self._heard: dict[str, float] = {}  # client id: loop time of its last beat or receive
        self._task: asyncio.Task[None] | None = None
        self.renewed = 0  # renewals made (runtime figure, and for tests through logs)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="proxy-renew")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def __len__(self) -> int:
        return len(self._held)

    def heard(self, client_id: str) -> None:
        """A heartbeat or a receive of the client (only clients holding handles are kept)."""
        if client_id in self._heard:
            self._heard[client_id] = asyncio.get_running_loop().time()

    def hold(self, client_id: str, group: str, topic: str, given: str, invisible_ms: int) -> None:
        """`given` (the handle the client got) is renewed from now on."""
        if len(self._held) >= MAX_HELD:
            log.warning("%d handles held already: %s of %s not renewed", MAX_HELD, given, group)
            return
        now = asyncio.get_running_loop().time()
        self._heard[client_id] = now
        receipt = receipts.decode(given)
        self._held[(group, given)] = Held(
            client_id, group, topic, receipt, now + invisible_ms / 1000, now
        )

    async def settle(self, group: str, given: str, action: Settle[T]) -> T:
        """`action` (an ack, a nack, a forward to the DLQ) with the receipt the broker holds
        now for `given` (the client's own when it is not held); its renewal ends when the
        action succeeds, or fails because the handle is not valid any more. Renewals wait
        meanwhile: a renewal under way ends first, and its new handle is the one used."""
        held = self._held.get((group, given))
        if held is None:
            return await action(receipts.decode(given))
        async with held.lock:
            try:
                result = await action(held.receipt)
            except (FerryError, ProxyError) as err:
                if _invalid(err):
                    self._forget(group, given, held)
                raise
            self._forget(group, given, held)
            return result

    def moved(self, group: str, given: str, receipt: receipts.Receipt) -> None:
        """Within a settle: the broker's handle changed (a forward's first step), so that a
        retry of what follows goes with the new one."""
        held = self._held.get((group, given))
        if held is not None:
            held.receipt = receipt

    def _forget(self, group: str, given: str, held: Held) -> None:
        if self._held.get((group, given)) is held:
            del self._held[(group, given)]

    def drop_client(self, client_id: str) -> None:
        """The client's stream closed: its handles are left to come back in their time."""
        self._heard.pop(client_id, None)
        for key in [k for k, h in self._held.items() if h.client_id == client_id]:
            del self._held[key]

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(PERIOD_S)
            try:
                await self.tick()
            except Exception:
                log.exception("a renewal round failed")

    async def tick(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        silent = {c for c, t in self._heard.items() if now - t > CLIENT_SILENT_S}
        for client_id in silent:
            log.info("client %s is silent: its handles are not renewed", client_id)
            self.drop_client(client_id)
        due: list[tuple[tuple[str, str], Held]] = []
        for key, held in list(self._held.items()):
            if now - held.since > self.policy.max_ms / 1000:
                log.info("%s of %s held past renewMaxTimeMillis: not renewed", key[1], key[0])
                del self._held[key]
            elif held.until - now <= self.policy.ahead_ms / 1000:
                due.append((key, held))
        for start in range(0, len(due), MAX_RENEWING):
            batch = due[start : start + MAX_RENEWING]
            await asyncio.gather(*(self._renew(key, held) for key, held in batch))

    async def _renew(self, key: tuple[str, str], held: Held) -> None:
        async with held.lock:
            if self._held.get(key) is not held:
                return  # acked, nacked or dropped meanwhile
            try:
                held.receipt = await self._popper.change(
                    held.group, held.topic, held.receipt, self.policy.invisible_ms
                )
            except (FerryError, ProxyError) as err:
                log.info("renewal of %s of %s failed: %s", key[1], key[0], err)
                self._held.pop(key, None)
                return
            held.until = asyncio.get_running_loop().time() + self.policy.invisible_ms / 1000
            self.renewed += 1
