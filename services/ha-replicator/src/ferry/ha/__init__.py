"""Ferry HA replicator: master to slave CommitLog replication"""
