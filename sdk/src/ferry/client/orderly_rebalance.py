"""How an orderly push consumer's queues change hands: only between batches and under the
brokers' queue locks. A queue given up is released after its running batch, its offset
committed before its lock goes; a new queue is pulled only once this member holds its lock.
A member that cannot have a queue yet (its batch runs long, another member still holds it)
tries again at its next, quick, rebalance."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ferry.client.consume_orderly import OrderlyConsumeService
from ferry.client.instance import ClientInstance
from ferry.client.message import MessageQueue
from ferry.client.message_selector import Expression
from ferry.client.puller import Puller
from ferry.client.rebalance import lock_queues, unlock_queues

log = logging.getLogger("ferry.client.rebalance")

RELEASE_WAIT_S = 1.0  # how long a rebalance waits for a queue's running batch


def move_orderly(
    inst: ClientInstance,
    group: str,
    puller: Puller,
    service: OrderlyConsumeService,
    wanted: dict[MessageQueue, Expression],
    keep_topics: set[str],
    commit: Callable[[], None],
) -> bool:
    """Moves to the `wanted` queues; True when something has to wait for a later try."""
    retry_soon = False
    current = {s.queue: s for s in puller.states()}
    held: list[MessageQueue] = []
    for queue, state in current.items():
        if queue in wanted or queue.topic in keep_topics:
            continue
        if service.process(state).consume_lock.acquire(timeout=RELEASE_WAIT_S):
            held.append(queue)
        else:  # a long batch: keep the queue this time
            wanted[queue] = state.expression
            retry_soon = True
    new = [q for q in wanted if q not in current]
    locked = lock_queues(inst, group, new) if new else set()
    for queue in new:
        if queue not in locked:
            del wanted[queue]  # another member still holds it
            retry_soon = True
    service.locked(locked)
    try:
        puller.assign(wanted, keep_topics)
        if held:
            commit()
            unlock_queues(inst, group, held)
            service.unlocked(held)
    finally:
        for queue in held:
            service.process(current[queue]).consume_lock.release()
    return retry_soon


def renew_locks(
    inst: ClientInstance, group: str, puller: Puller, service: OrderlyConsumeService
) -> None:
    """Locks the queues again (every lock_renew_interval); a queue whose lock is lost stops
    being consumed once its last lock is older than lock_max_live."""
    queues = puller.queues()
    locked = lock_queues(inst, group, queues) if queues else set()
    service.locked(locked)
    for queue in locked:
        state = puller.state(queue)
        if state is not None:
            service.schedule(state)
    if len(locked) < len(queues):
        log.warning("%s: lost the lock of %d queue(s)", group, len(queues) - len(locked))
