"""QueuePoll: the reading loop the scheduler's queue readers share (delay levels, timers,
transaction queues). One long-polling get on a store queue is in flight at a time; a failed
get is asked again after RETRY_S; an answer that comes after stop() is dropped."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ferry.protocol.messages import AnyReply, ErrorReply, StoreGetReply, StoreGetRequest
from ferry.runtime.service import Peer, Service

FETCH_MSGS = 256
SUSPEND_MS = 5000  # long polling: the store answers at once when the queue grows
GET_TIMEOUT_S = SUSPEND_MS / 1000 + 10
RETRY_S = 1.0


class QueuePoll(ABC):
    def __init__(self, service: Service, store: Peer) -> None:
        self._service = service
        self._store = store
        self._fetching = False
        self.stopped = True

    def start(self) -> None:
        self.stopped = False
        self._fetch()

    def stop(self) -> None:
        self.stopped = True

    @abstractmethod
    def _fetch(self) -> None:
        """Reads on with _get(), unless a get is in flight, the reader stopped or must wait."""

    @abstractmethod
    def _failed(self, reason: str) -> None:
        """A get failed; it is asked again after RETRY_S."""

    @abstractmethod
    def _on_reply(self, body: StoreGetReply, frames: list[Any]) -> None:
        """The store answered a get while the reader runs."""

    def _get(self, topic: str, queue_id: int, offset: int, suspend_ms: int = SUSPEND_MS) -> None:
        self._fetching = True
        self._store.request(
            StoreGetRequest(
                topic=topic,
                queue_id=queue_id,
                queue_offset=offset,
                max_msgs=FETCH_MSGS,
                suspend_ms=suspend_ms,
            ),
            self._on_fetch,
            timeout_s=GET_TIMEOUT_S,
        )

    def _on_fetch(self, body: AnyReply, frames: list[Any]) -> None:
        self._fetching = False
        if self.stopped:
            return
        if not isinstance(body, StoreGetReply):
            self._failed(body.message if isinstance(body, ErrorReply) else type(body).__name__)
            self._service.later(RETRY_S, self._fetch)
            return
        self._on_reply(body, frames)
