"""The replicator's metrics (made only when metrics are on): replication lag in bytes, read at
collection. On a master, per slave: the log's end minus what the slave acked; on a slave: the
master's last known end minus its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferry.ha.master import MasterReplicator
from ferry.ha.slave import SlaveReplicator
from ferry.runtime import metrics
from ferry.runtime.metrics import Points

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class HaMetrics:
    def __init__(
        self,
        master: MasterReplicator | None,
        slave: SlaveReplicator | None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        def lag() -> Points:
            if master is not None:
                return [
                    (float(max(0, master.log_end - link.acked)), {"slave_id": str(link.broker_id)})
                    for link in list(master.links.values())
                ]
            if slave is not None:
                return [(float(max(0, slave.master_max - slave.applied)), {"role": "slave"})]
            return []

        metrics.observe(
            metrics.registry() if registry is None else registry,
            metrics.REPLICATION_LAG_BYTES,
            "gauge",
            "CommitLog bytes written on the master and not yet on a slave",
            lag,
        )
