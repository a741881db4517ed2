"""What the sync and the asyncio Producer share once started: the instance, the publisher and
preparer made on it, and the request of one send (ferry.client.aio's Producer is one too)."""

from __future__ import annotations

from typing import Generic

from ferry.client.instance import InstanceT, not_started
from ferry.client.outgoing import Outgoing, send_request
from ferry.client.prepare import Preparer
from ferry.client.producer_settings import ProducerSettings
from ferry.client.publish import Publisher, Target
from ferry.protocol.messages import SendMessageRequest


class ProducerBase(ProducerSettings, Generic[InstanceT]):
    _instance: InstanceT | None = None
    _publisher: Publisher | None = None
    _preparer: Preparer | None = None

    def _open(self, kind: type[InstanceT]) -> InstanceT:
        """A new instance, with the publisher and preparer on it (start() keeps them)."""
        inst = self._open_instance(kind, "producer")
        self._publisher, self._preparer = self._sending_parts(inst.routes, inst, inst.tracing)
        return inst

    @property
    def client_id(self) -> str:
        return self._started().client_id

    def _started(self) -> InstanceT:
        inst = self._instance
        if inst is None:
            raise not_started(f"producer {self.group}")
        return inst

    def _parts(self) -> tuple[InstanceT, Publisher]:
        inst = self._started()
        assert self._publisher is not None
        return inst, self._publisher

    def _encoder(self) -> Preparer:
        self._started()
        assert self._preparer is not None
        return self._preparer

    def _request(self, out: Outgoing, target: Target) -> SendMessageRequest:
        return send_request(self.group, out, target, self.default_topic_queue_nums)
