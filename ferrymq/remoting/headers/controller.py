"""The failover controller's headers (FerryMQ's own protocol, ferrymq/common/controller_protocol.py;
docs/wire-format.md#typed-headers)."""

from __future__ import annotations

from ferrymq.common.controller_protocol import NONE, WAIT
from ferrymq.remoting.headers.base import BOOL, LONG, Header, header, wire


@header
class ControllerHeartbeatHeader(Header):
    """CONTROLLER_HEARTBEAT: a broker says where it stands."""

    broker_name: str = wire("brokerName", required=True)
    acting: str = wire("acting", default=NONE)
    broker_id: int = wire("brokerId", LONG, required=True)
    broker_addr: str = wire("brokerAddr", required=True)
    ha_server_addr: str = wire("haServerAddr", default="")
    epoch: int = wire("epoch", LONG, 0)
    max_offset: int = wire("maxOffset", LONG, 0)
    confirmed_offset: int = wire("confirmedOffset", LONG, 0)
    cluster_name: str = wire("clusterName", default="")


@header
class ControllerHeartbeatResponseHeader(Header):
    """CONTROLLER_HEARTBEAT's answer: the broker's role and what it needs to take it up (None:
    absent, the reader picks its own default)."""

    role: str = wire("role", default=WAIT)
    epoch: int = wire("epoch", LONG, 0)
    epoch_start_offset: int | None = wire("epochStartOffset", LONG)
    master_id: int = wire("masterId", LONG, -1)
    master_addr: str = wire("masterAddr", default="")
    master_ha_addr: str = wire("masterHaAddr", default="")
    truncate_offset: int = wire("truncateOffset", LONG, -1)
    promote: bool = wire("promote", BOOL, False)
    in_sync: str = wire("inSync", default="")
    in_sync_epoch: int = wire("inSyncEpoch", LONG, 0)
    unclean_election: bool = wire("uncleanElection", BOOL, False)
    failover_timeout: int | None = wire("failoverTimeout", LONG)


@header
class ControllerPromotedHeader(Header):
    """CONTROLLER_PROMOTED: a broker took up the mastership it was offered."""

    broker_name: str = wire("brokerName", required=True)
    broker_id: int = wire("brokerId", LONG, required=True)
    epoch: int = wire("epoch", LONG, required=True)
    start_offset: int = wire("startOffset", LONG, required=True)


@header
class AlterInSyncHeader(Header):
    """CONTROLLER_ALTER_IN_SYNC: a master proposes its in-sync set."""

    broker_name: str = wire("brokerName", required=True)
    broker_id: int = wire("brokerId", LONG, required=True)
    epoch: int = wire("epoch", LONG, required=True)
    in_sync: str = wire("inSync", default="")
    in_sync_epoch: int = wire("inSyncEpoch", LONG, required=True)
    confirmed_offset: int = wire("confirmedOffset", LONG, 0)


@header
class ControllerHandOverHeader(Header):
    """CONTROLLER_HAND_OVER: a master shutting down asks for a successor now."""

    broker_name: str = wire("brokerName", required=True)
    broker_id: int = wire("brokerId", LONG, required=True)
    epoch: int = wire("epoch", LONG, required=True)
    confirmed_offset: int = wire("confirmedOffset", LONG, 0)


@header
class HandOverResponseHeader(Header):
    """CONTROLLER_HAND_OVER's answer: the slave offered the new epoch."""

    successor_id: int = wire("successorId", LONG, -1)
    epoch: int = wire("epoch", LONG, 0)


@header
class InSyncEpochResponseHeader(Header):
    """CONTROLLER_PROMOTED's and CONTROLLER_ALTER_IN_SYNC's answer."""

    in_sync_epoch: int | None = wire("inSyncEpoch", LONG)


@header
class NotLeaderResponseHeader(Header):
    """CONTROLLER_NOT_LEADER's answer: where the leader is, if known."""

    leader_addr: str = wire("leaderAddr", default="")
