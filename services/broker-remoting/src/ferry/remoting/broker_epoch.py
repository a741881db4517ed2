"""getBrokerEpoch (controller mode): this broker's epoch file, read where the broker agent
keeps it, beside the store (one machine, one storePathRootDir)."""

from __future__ import annotations

from collections.abc import Callable

from ferry.protocol.messages import BrokerEpochReply, EpochEntry, GetBrokerEpochRequest
from ferry.remoting.calls import Caller
from ferry.runtime import epoch_file
from ferry.runtime.config import BrokerConfig


def broker_epoch(
    config: BrokerConfig,
) -> Callable[[GetBrokerEpochRequest, Caller], BrokerEpochReply]:
    """getBrokerEpoch: this broker's epoch file (the agent keeps it beside the store)."""

    def answer(_req: GetBrokerEpochRequest, _call: Caller) -> BrokerEpochReply:
        return BrokerEpochReply(
            cluster=config.broker_cluster_name,
            broker_name=config.broker_name,
            broker_id=config.broker_id,
            role=config.broker_role,
            epochs=[EpochEntry(e, s) for e, s in epoch_file.load(config.store_root)],
        )

    return answer
