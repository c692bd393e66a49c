"""The FerryMQ controller's remoting requests (failover, issue 13). FerryMQ's own protocol on
RocketMQ's remoting frames, not RocketMQ 5's controller wire: codes and field names below are
ours. Brokers (``ferrymq.broker.ha.failover``) send them; ``ferrymq.controller`` answers. The
headers below are declared, typed, in ferrymq/remoting/headers/controller.py (docs/wire-format.md#typed-headers).

CONTROLLER_HEARTBEAT (every ``controllerHeartbeatInterval``), ext fields:
  clusterName, brokerName, brokerId (the broker's own id from its config, its identity),
  brokerAddr, haServerAddr, epoch (the last epoch in its epoch file), maxOffset (CommitLog
  end), confirmedOffset (a master: the offset a successor must hold so no acknowledged message
  is lost; SYNC_MASTER: the end of the last message acknowledged SEND_OK), acting (its role
  now: MASTER, SLAVE or NONE).
  Answer (SUCCESS), ext fields: role (MASTER, SLAVE or WAIT), epoch, epochStartOffset,
  masterId, masterAddr, masterHaAddr, truncateOffset (-1: keep everything), promote (true:
  become master of the new ``epoch`` and report where it starts), failoverTimeout (ms).

CONTROLLER_PROMOTED: brokerName, brokerId, epoch, startOffset (the CommitLog end where the new
  master's epoch begins, read after it stopped copying from the old master). SUCCESS once
  recorded (fsynced); anything else: the promotion is off.

CONTROLLER_ALTER_IN_SYNC (the master only): brokerName, brokerId (its identity), epoch, inSyncEpoch
  (the version of the in-sync set it changes), inSync (the new set of slave identities, comma
  separated; the master is always a member), confirmedOffset (as in the heartbeat: a slave taken
  in is waited for from before the request, so this bounds what the master acknowledged alone). SUCCESS with the new inSyncEpoch once recorded;
  anything else: the set is unchanged (a stale epoch, a broker that is not master).

CONTROLLER_HAND_OVER (the master, as it shuts down: a controlled shutdown): brokerName, brokerId,
  epoch, confirmedOffset (what its in-sync slaves hold: it took no send since it fenced itself).
  SUCCESS with ext fields successorId and epoch: that in-sync slave is offered the new epoch at
  its next heartbeat, without waiting for the master to fall silent; anything else: no hand-over
  (the controller elects once the master has been silent for the failover timeout).

A controller replica that does not lead (several replicas behind Lease election) answers every
request with CONTROLLER_NOT_LEADER and ext field leaderAddr (the leader's address when it knows
it, else empty): brokers try that address, then the others they were given.

CONTROLLER_GET_STATE: no fields; the body is JSON, per broker group its epoch history and the
  brokers last heard of (tests, ``ferrymq admin`` and the operator read it).
"""

from __future__ import annotations

CONTROLLER_HEARTBEAT = 9001
CONTROLLER_PROMOTED = 9002
CONTROLLER_GET_STATE = 9003
CONTROLLER_ALTER_IN_SYNC = 9004
CONTROLLER_HAND_OVER = 9005

CONTROLLER_NOT_LEADER = 9010  # response code: this replica does not lead; see leaderAddr

MASTER, SLAVE, WAIT, NONE = "MASTER", "SLAVE", "WAIT", "NONE"
ROLES = (MASTER, SLAVE, WAIT)
