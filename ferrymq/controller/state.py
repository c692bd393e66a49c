"""The controller's picture of each broker group and its decisions, as pure state (no I/O):
who is master in which epoch since which CommitLog offset, which brokers were heard from, who
is elected when the master falls silent, and how much of a returning broker's CommitLog the
group still shares.

Epoch history: one ``EpochRecord`` per master term. Epoch N began at ``start_offset`` on broker
``master_id``; every byte before it was written during earlier epochs. A broker whose last
epoch is K shares the group's CommitLog up to the start of the first epoch after K: beyond
that it holds bytes only its old master wrote (never acknowledged under SYNC_MASTER, see
``elect``), and it truncates them before it follows the current master.

In-sync set: the slaves the master counts on to hold everything it acknowledges (RocketMQ 5's
SyncStateSet). Only the master changes it, by compare-and-swap on its version
(``alter_in_sync``); a new epoch starts with the new master alone. Elections take only members.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferrymq.common.controller_protocol import MASTER, NONE, SLAVE, WAIT


@dataclass(frozen=True)
class EpochRecord:
    epoch: int
    start_offset: int
    master_id: int

    def to_dict(self) -> dict:
        return {"epoch": self.epoch, "startOffset": self.start_offset, "masterId": self.master_id}

    @classmethod
    def from_dict(cls, d: dict) -> "EpochRecord":
        return cls(int(d["epoch"]), int(d["startOffset"]), int(d["masterId"]))


@dataclass
class BrokerSeen:
    """A broker's last heartbeat (not persisted: a restarted controller hears them again)."""

    broker_id: int
    addr: str
    ha_addr: str
    epoch: int
    max_offset: int
    confirmed_offset: int
    acting: str
    seen_at: float  # controller's monotonic clock

    def to_dict(self, now: float) -> dict:
        return {"brokerId": self.broker_id, "addr": self.addr, "haAddr": self.ha_addr, "epoch": self.epoch,
                "maxOffset": self.max_offset, "acting": self.acting, "silentMs": int((now - self.seen_at) * 1000)}


@dataclass
class Pending:
    """An election under way: ``broker_id`` is to become master of ``epoch`` once it reports
    where its CommitLog ends (CONTROLLER_PROMOTED)."""

    broker_id: int
    epoch: int
    since: float


@dataclass
class Answer:
    role: str
    epoch: int = 0
    epoch_start_offset: int = -1
    master_id: int = -1
    master_addr: str = ""
    master_ha_addr: str = ""
    truncate_offset: int = -1
    promote: bool = False
    in_sync: frozenset[int] = frozenset()  # the master's answer: its committed in-sync set
    in_sync_epoch: int = 0


@dataclass
class Group:
    cluster: str
    name: str
    history: list[EpochRecord] = field(default_factory=list)
    # The highest offset the current master said a successor must hold (persisted: a
    # controller restarted while the master is down must not elect a slave short of it).
    must_reach: int = 0
    # The slaves (broker identities, the master not included) that hold everything the master
    # acknowledged, and the version of that set (persisted: elections take only them).
    in_sync: frozenset[int] = frozenset()
    in_sync_epoch: int = 0
    brokers: dict[int, BrokerSeen] = field(default_factory=dict)
    pending: Pending | None = None
    no_candidate_logged: bool = False

    @property
    def current(self) -> EpochRecord | None:
        return self.history[-1] if self.history else None

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "history": [r.to_dict() for r in self.history], "mustReach": self.must_reach,
                "inSync": sorted(self.in_sync), "inSyncEpoch": self.in_sync_epoch}

    @classmethod
    def from_dict(cls, name: str, d: dict) -> "Group":
        return cls(str(d.get("cluster", "")), name, [EpochRecord.from_dict(r) for r in d.get("history", [])],
                   int(d.get("mustReach", 0)), frozenset(int(m) for m in d.get("inSync", [])),
                   int(d.get("inSyncEpoch", 0)))

    def decisions(self) -> tuple:
        """What a request may change here, to be put back with ``undo`` when it cannot be written."""
        return tuple(self.history), self.must_reach, self.in_sync, self.in_sync_epoch, self.pending

    def undo(self, decisions: tuple) -> None:
        history, self.must_reach, self.in_sync, self.in_sync_epoch, self.pending = decisions
        self.history = list(history)

    def new_term(self, record: EpochRecord) -> None:
        """A master's term begins: it is the in-sync set's only member until it proposes more."""
        self.history.append(record)
        self.pending = None
        self.must_reach = record.start_offset
        self.in_sync = frozenset()
        self.in_sync_epoch += 1

    def status(self, now: float) -> dict:
        cur = self.current
        return {**self.to_dict(), "masterId": cur.master_id if cur else None, "epoch": cur.epoch if cur else 0,
                "pending": {"brokerId": self.pending.broker_id, "epoch": self.pending.epoch} if self.pending else None,
                "brokers": [b.to_dict(now) for _, b in sorted(self.brokers.items())]}


def truncation_point(history: list[EpochRecord], local_epoch: int, max_offset: int) -> int:
    """Where a broker whose last epoch is ``local_epoch`` and whose CommitLog ends at
    ``max_offset`` must cut its CommitLog to continue the group's: the start of the first
    epoch after its own, if its data reaches past that; -1 when it keeps everything."""
    following = next((r for r in history if r.epoch > local_epoch), None)
    if following is None or max_offset <= following.start_offset:
        return -1
    return following.start_offset


def heartbeat_answer(group: Group, seen: BrokerSeen) -> Answer:
    """What a broker that just reported ``seen`` is to do (the group has a history or a pending
    election; the first master is chosen by the caller)."""
    cur = group.current
    if group.pending is not None:
        p = group.pending
        if seen.broker_id == p.broker_id:
            # An unclean choice may lag epochs behind: it first drops what the group does not share.
            return Answer(MASTER, p.epoch, promote=True,
                          truncate_offset=truncation_point(group.history, seen.epoch, seen.max_offset))
        return Answer(WAIT, cur.epoch if cur else 0)  # fence: a new master is being made
    assert cur is not None
    if seen.broker_id == cur.master_id:
        if seen.acting == MASTER and seen.epoch == cur.epoch:
            group.must_reach = max(group.must_reach, seen.confirmed_offset)
        return Answer(MASTER, cur.epoch, cur.start_offset, cur.master_id, in_sync=group.in_sync,
                      in_sync_epoch=group.in_sync_epoch)
    master = group.brokers.get(cur.master_id)
    if master is None or master.acting != MASTER or master.epoch != cur.epoch:
        return Answer(WAIT, cur.epoch)  # the master has not taken up its term (yet)
    return Answer(SLAVE, cur.epoch, cur.start_offset, cur.master_id, master.addr, master.ha_addr,
                  truncation_point(group.history, seen.epoch, seen.max_offset))


def elect(group: Group, now: float, timeout_s: float, silent_since: float, unclean: bool) -> BrokerSeen | None:
    """The broker to promote when the master has been silent since ``silent_since``: a member
    of the in-sync set heard from after that (its offset is final: nothing flows from a dead
    master), following the current epoch, holding at least ``must_reach`` (everything the
    master acknowledged); among those the one with the most data. ``unclean``
    (enableElectUncleanMaster) also accepts any live slave, losing what it lacks."""
    cur = group.current
    live = [b for b in group.brokers.values()
            if b.broker_id != cur.master_id and now - b.seen_at < timeout_s and b.seen_at > silent_since
            and b.acting == SLAVE]
    clean = [b for b in _in_sync_of_this_epoch(group, live) if b.max_offset >= group.must_reach]
    pool = clean or (live if unclean else [])
    if not pool:
        return None
    return max(pool, key=lambda b: (b.max_offset, -b.broker_id))


def hand_over(group: Group, broker_id: int, epoch: int, confirmed: int, now: float,
              timeout_s: float) -> tuple[BrokerSeen | None, str | None]:
    """The master of ``epoch`` shuts down (a controlled shutdown) after fencing itself at
    ``confirmed``, which its in-sync slaves hold: the successor offered the next epoch now, or
    why not. A live member of the in-sync set following the current epoch, the one with the most
    data. Its offset as last reported may lag by a heartbeat; it reports the final one when it
    takes up the epoch, and a successor short of ``confirmed`` is refused then (``promoted``)."""
    cur = group.current
    if cur is None or cur.master_id != broker_id or cur.epoch != epoch:
        return None, f"broker {broker_id} is not the master of epoch {epoch}"
    if group.pending is not None:
        return None, f"an election (epoch {group.pending.epoch}) is under way"
    live = _in_sync_of_this_epoch(group, [b for b in group.brokers.values()
                                          if b.acting == SLAVE and now - b.seen_at < timeout_s])
    if not live:
        return None, f"no in-sync slave heard from within {timeout_s:g} s"
    chosen = max(live, key=lambda b: (b.max_offset, -b.broker_id))
    group.must_reach = max(group.must_reach, confirmed)
    group.pending = Pending(chosen.broker_id, cur.epoch + 1, now)
    return chosen, None


def _in_sync_of_this_epoch(group: Group, brokers: list[BrokerSeen]) -> list[BrokerSeen]:
    """Those of ``brokers`` in the in-sync set and following the current epoch: who may succeed."""
    return [b for b in brokers if b.broker_id in group.in_sync and b.epoch == group.current.epoch]


def alter_in_sync(group: Group, broker_id: int, epoch: int, in_sync_epoch: int, members: frozenset[int]) -> str | None:
    """Commit the in-sync set the master proposes, or say why not: only the current master of
    the current epoch, from the version it last saw (so a stale or cut-off master changes
    nothing), never while an election is under way, never naming the master itself."""
    cur = group.current
    if cur is None or cur.master_id != broker_id or cur.epoch != epoch:
        return f"broker {broker_id} is not the master of epoch {epoch}"
    if group.pending is not None:
        return f"an election (epoch {group.pending.epoch}) is under way"
    if in_sync_epoch != group.in_sync_epoch:
        return f"the in-sync set is at version {group.in_sync_epoch}, not {in_sync_epoch}"
    if broker_id in members or any(m < 0 for m in members):
        return f"the in-sync set names slaves only, got {sorted(members)}"
    group.in_sync = frozenset(members)
    group.in_sync_epoch += 1
    return None


def first_master(seen: BrokerSeen) -> EpochRecord:
    """A group the controller never saw gets broker 0 as master, in an epoch after any its
    epoch file knows of, starting where its CommitLog ends."""
    return EpochRecord(max(seen.epoch, 0) + 1, seen.max_offset, seen.broker_id)


ACTING = (MASTER, SLAVE, NONE)
