"""Master–slave replication on RocketMQ 4.x's HA protocol (HAService): the frame codec,
the master's service that streams its CommitLog to slaves, the slave's client that writes
it into its own CommitLog, and the slave's metadata sync (SlaveSynchronize)."""
