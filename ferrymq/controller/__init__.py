"""The failover controller (issue 13): decides which broker of each master–slave group is
master, bumps the group's epoch at each failover, and keeps the epoch history on disk."""
