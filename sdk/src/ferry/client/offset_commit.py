"""Sending consume offsets where they are kept: the brokers (UPDATE_CONSUMER_OFFSET, one
request per broker) or, for broadcasting consumers, the local offset file."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from ferry.client.consume_state import QueueState, offset_entries
from ferry.client.instance import ClientInstance
from ferry.client.offset_store import LocalOffsetStore
from ferry.client.transport import Result, wait
from ferry.protocol.errors import BrokerNotExistError, FerryError
from ferry.protocol.messages import OffsetEntry, UpdateConsumerOffsetRequest

Entries = list[tuple[QueueState, int]]


class OffsetCommitter:
    def __init__(
        self,
        inst: ClientInstance,
        group: str,
        cond: threading.Condition,
        local: LocalOffsetStore | None,
    ) -> None:
        self._inst = inst
        self._group = group
        self._cond = cond
        self.local = local

    def commit(self, by_broker: dict[str, Entries]) -> tuple[list[FerryError], Entries]:
        """Commits the entries; returns the errors and the entries not committed. A committed
        entry's state learns its committed_offset."""
        if self.local is not None:
            return self._commit_local(by_broker)
        inst = self._inst
        errors: list[FerryError] = []
        failed: Entries = []
        sent: list[tuple[Future[Result], Entries]] = []
        for broker, entries in by_broker.items():
            addr = inst.routes.addr_of(broker, read=True)  # a slave while the master is gone
            if addr is None:
                errors.append(BrokerNotExistError(f"no master address for broker {broker}"))
                failed.extend(entries)
                continue
            body = UpdateConsumerOffsetRequest(self._group, offset_entries(entries))
            sent.append((inst.connection(addr).submit(body, timeout_s=inst.api_timeout_s), entries))
        for future, entries in sent:
            try:
                wait(future, inst.api_timeout_s)
            except FerryError as err:
                errors.append(err)
                failed.extend(entries)
                continue
            self._committed(entries)
        return errors, failed

    def commit_start(self, state: QueueState, offset: int) -> None:
        """Commits where a queue starts, without waiting for the answer."""
        q = state.queue
        if self.local is not None:
            self.local.update(q, offset)
            return
        addr = self._inst.routes.addr_of(q.broker_name, read=True)
        if addr is None:
            return  # the regular commit sends it
        body = UpdateConsumerOffsetRequest(self._group, [OffsetEntry(q.topic, q.queue_id, offset)])
        future = self._inst.connection(addr).submit(body, timeout_s=self._inst.api_timeout_s)

        def done(f: Future[Result]) -> None:
            if f.exception() is None:
                with self._cond:
                    if state.committed_offset == -1 and state.consume_offset == offset:
                        state.committed_offset = offset

        future.add_done_callback(done)

    def _commit_local(self, by_broker: dict[str, Entries]) -> tuple[list[FerryError], Entries]:
        local = self.local
        assert local is not None
        entries = [entry for group in by_broker.values() for entry in group]
        for state, offset in entries:
            local.update(state.queue, offset)
        try:
            local.persist()
        except OSError as exc:
            return [FerryError(f"offsets not saved to {local.path}: {exc}")], entries
        self._committed(entries)
        return [], []

    def _committed(self, entries: Entries) -> None:
        with self._cond:
            for state, offset in entries:
                state.committed_offset = offset
