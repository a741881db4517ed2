"""The broker agent: controller mode's broker side (RocketMQ 5's ReplicasManager), one process
of each `ferry serve broker` tree, supervised like the tree's services.

It heartbeats to the controller for its replica and acts on its own tree: write leases to the
store and remoting, role changes through the tree's supervisor (ferry.protocol.messages.tree),
cuts and rebuilds of a diverged log. It lives beside the controller because it is the
controller's other half; like every service it imports only ferry.protocol and ferry.runtime.
"""
