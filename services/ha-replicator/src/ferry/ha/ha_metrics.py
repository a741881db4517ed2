"""The replicator's OpenTelemetry metrics (made only when metrics are on): replication lag in
bytes, observed at collection. On a master, per slave: the log's end minus what the slave
acked; on a slave: the master's last known end minus its own."""

from __future__ import annotations

from collections.abc import Mapping

from ferry.ha.master import MasterReplicator
from ferry.ha.slave import SlaveReplicator
from ferry.runtime import metrics

Points = list[tuple[float, Mapping[str, str]]]


class HaMetrics:
    def __init__(self, master: MasterReplicator | None, slave: SlaveReplicator | None) -> None:
        def lag() -> Points:
            if master is not None:
                return [
                    (float(max(0, master.log_end - link.acked)), {"slave_id": str(link.broker_id)})
                    for link in list(master.links.values())
                ]
            if slave is not None:
                return [(float(max(0, slave.master_max - slave.applied)), {"role": "slave"})]
            return []

        metrics.meter("ferry.ha").create_observable_gauge(
            metrics.REPLICATION_LAG_BYTES,
            [metrics.observe(metrics.REPLICATION_LAG_BYTES, lag)],
            unit="By",
            description="CommitLog bytes written on the master and not yet on a slave",
        )
