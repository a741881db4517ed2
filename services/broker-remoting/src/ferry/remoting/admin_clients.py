"""mqadmin's requests about live clients and traffic: consumerConnection,
producerConnection, resetOffsetByTime (offsets set here, live members told with a
ResetOffsetNotice, RocketMQ's RESET_CONSUMER_CLIENT_OFFSET) and statsAll."""

from __future__ import annotations

import logging

from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import (
    BrokerStatsReply,
    ClientConnection,
    ConsumerConnectionReply,
    GetBrokerStatsRequest,
    GetConsumerConnectionListRequest,
    GetProducerConnectionListRequest,
    ProducerConnectionReply,
    ResetOffsetNotice,
    ResetOffsetReply,
    ResetOffsetRequest,
    TopicTraffic,
)
from ferry.protocol.names import check_group, check_topic
from ferry.remoting.calls import Caller
from ferry.remoting.client_table import ClientInfo, ClientTable
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.member_notices import MemberNotifier
from ferry.remoting.stats import BrokerStats
from ferry.remoting.subscription_groups import SubscriptionGroupTable

log = logging.getLogger("ferry.remoting.admin")


def connection(info: ClientInfo) -> ClientConnection:
    return ClientConnection(
        client_id=info.client_id,
        client_addr=info.client_addr,
        language=info.language,
        version=info.version,
        last_heartbeat_ms=info.last_seen_ms,
    )


class ClientAdmin:
    def __init__(
        self,
        clients: ClientTable,
        groups: SubscriptionGroupTable,
        offsets: ConsumerOffsetTable,
        notifier: MemberNotifier,
        stats: BrokerStats,
        broker_name: str,
    ) -> None:
        self._broker_name = broker_name
        self._clients = clients
        self._groups = groups
        self._offsets = offsets
        self._notifier = notifier
        self._stats = stats

    def consumer_connections(
        self, req: GetConsumerConnectionListRequest, _call: Caller
    ) -> ConsumerConnectionReply:
        check_group(req.consumer_group)
        infos = self._clients.clients_of(consumer_group=req.consumer_group)
        if not infos:
            return ConsumerConnectionReply(connections=[])
        data = infos[0].consumers[req.consumer_group]
        return ConsumerConnectionReply(
            connections=[connection(i) for i in infos],
            consume_type=data.consume_type,
            message_model=data.message_model,
            consume_from=data.consume_from,
            subscriptions=list(data.subscriptions),
        )

    def producer_connections(
        self, req: GetProducerConnectionListRequest, _call: Caller
    ) -> ProducerConnectionReply:
        check_group(req.producer_group)
        infos = self._clients.clients_of(producer_group=req.producer_group)
        return ProducerConnectionReply(
            connections=[connection(i) for i in infos], groups=self._clients.producer_groups()
        )

    def reset_offset(self, req: ResetOffsetRequest, call: Caller) -> None:
        check_group(req.consumer_group)
        check_topic(req.topic)
        for entry in req.offsets:  # all checked before any is applied
            if entry.topic != req.topic or entry.queue_id < 0 or entry.offset < 0:
                raise InvalidParameterError(
                    f"bad offset entry {entry.topic}:{entry.queue_id} -> {entry.offset}"
                )
        self._groups.ensure(req.consumer_group)
        for entry in req.offsets:
            self._offsets.commit(req.consumer_group, entry.topic, entry.queue_id, entry.offset)
        members = self._clients.consumer_ids(req.consumer_group)
        call.reply(ResetOffsetReply(notified=len(members)))
        notice = ResetOffsetNotice(
            req.consumer_group, req.topic, list(req.offsets), broker_name=self._broker_name
        )
        told = sum(1 for cid in members if self._notifier.tell(cid, notice))
        log.info(
            "offsets of %s on %s reset (%d queues, timestamp %d); %d of %d members told",
            req.consumer_group,
            req.topic,
            len(req.offsets),
            req.timestamp_ms,
            told,
            len(members),
        )

    def broker_stats(self, _req: GetBrokerStatsRequest, _call: Caller) -> BrokerStatsReply:
        puts, gets, window_ms = self._stats.traffic()
        return BrokerStatsReply(
            put=[TopicTraffic(t.key[0], "", t.total, t.tps) for t in puts],
            get=[TopicTraffic(t.key[0], t.key[1], t.total, t.tps) for t in gets],
            window_ms=window_ms,
        )
