"""`ferry-broker-agent` / `python -m ferry.controller.agent`: -c broker.conf, --set key=value.

Started by `ferry serve broker` with enableControllerMode=true, which passes its supervisor's
channel in FERRY_TREE_ENDPOINT (ferry.runtime.tree_channel), and restarted by it like the tree's
services."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ferry.controller.agent.replicas import BrokerAgent
from ferry.controller.agent.tree import Tree
from ferry.protocol.errors import ConfigError
from ferry.runtime.cli import run_service
from ferry.runtime.config import BrokerConfig
from ferry.runtime.service import Service, announce_ready
from ferry.runtime.tree_channel import AGENT, TREE_ENV
from ferry.runtime.version import package_version

PROG = "ferry-broker-agent"


def run(config: BrokerConfig) -> None:
    channel = os.environ.get(TREE_ENV, "")
    if not channel:
        raise ConfigError(f"{TREE_ENV} is not set: `ferry serve broker` starts the agent")
    if not config.enable_controller_mode or not config.controller_addr.strip():
        raise ConfigError("the broker agent needs enableControllerMode=true and controllerAddr")
    tree = Tree(channel, config)
    service = Service(AGENT, version=package_version("ferry-controller"))
    service.on_stop(tree.close)
    try:
        tree.start()
    except BaseException:
        tree.close()
        service.ctx.destroy(linger=0)
        raise
    agent = BrokerAgent(config, tree, lambda message: print(message, flush=True))
    # READY from the loop, once it handles signals; the first round right after it
    service.later(0, lambda: announce_ready(AGENT, replica=str(agent.replica_id)))
    service.every(config.broker_heartbeat_interval / 1000, agent.round, first_s=0)
    service.run()


def main(argv: Sequence[str] | None = None) -> None:
    run_service(PROG, AGENT, BrokerConfig, run, argv)


if __name__ == "__main__":
    main()
