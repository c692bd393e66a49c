"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection (and
kubernetes_asyncio's) does it, for processes that run in several replicas of which exactly one
may act: FerryMQ's controller, the operator.

How it decides, and why it is safe without synchronised clocks:

- A candidate takes the Lease only when it is free (no holderIdentity, or released) or when its
  record has not changed for a full lease duration **as seen on the candidate's own monotonic
  clock**: the candidate notes when it last saw the record change and waits ``lease_duration``
  from then. Remote timestamps (renewTime) are written for people reading the Lease, never
  compared with local time.
- The leader renews every ``retry_period`` by compare-and-swap on the Lease's resourceVersion.
  It counts itself leader only until ``renew_deadline`` after the start of its last successful
  renewal; a candidate cannot take over before ``lease_duration`` after it saw that renewal, which
  happened after the renewal started. With renew_deadline < lease_duration there is a margin in
  which nobody leads, never one in which two do (provided both clocks run at about the same
  rate, as client-go assumes too).
- Losing leadership (the deadline passed, or a renewal found another holder) is signalled at
  once: ``is_leader`` turns false and ``on_stopped_leading`` runs before anything else happens.
  ``is_leader`` also checks the deadline itself, so it is right even if the loop is late.
- On a clean shutdown (``run()`` cancelled with ``release_on_cancel``) or ``step_down()`` the
  leader clears holderIdentity, so a standby takes over at its next retry instead of waiting
  for the lease to run out.

Use::

    elector = LeaseElector(client, "ns", "my-lease", "pod-0",
                           on_started_leading=start, on_stopped_leading=stop)
    task = asyncio.create_task(elector.run())   # campaigns, leads, campaigns again, ...
    ...
    task.cancel()                               # releases the Lease if held

Callbacks are plain functions called on the event loop; they must not block (start a task for
slow work). Everything a leader does must stop when ``on_stopped_leading`` is called.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import math
import random
import time
from dataclasses import dataclass
from typing import Callable

from ferrymq.kube.client import LEASES, Conflict, KubeClient, KubeError, NotFound

log = logging.getLogger(__name__)

JITTER = 1.2  # client-go's JitterFactor: a candidate retries after retry_period * [1, 1.2)


@dataclass(frozen=True)
class LeaseRecord:
    """The election fields of a Lease's spec."""

    holder: str = ""
    duration_s: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    transitions: int = 0

    @classmethod
    def of(cls, lease: dict) -> "LeaseRecord":
        spec = lease.get("spec") or {}
        return cls(spec.get("holderIdentity") or "", int(spec.get("leaseDurationSeconds") or 0),
                   spec.get("acquireTime") or "", spec.get("renewTime") or "", int(spec.get("leaseTransitions") or 0))

    def to_spec(self) -> dict:
        spec = {"holderIdentity": self.holder, "leaseDurationSeconds": self.duration_s,
                "leaseTransitions": self.transitions}
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


def claimed_record(current: LeaseRecord | None, identity: str, duration_s: int, now: str) -> LeaseRecord:
    """The record ``identity`` writes to take or renew the Lease: a renewal keeps acquireTime
    and the transition count, a takeover from someone else (or from nobody) counts one more."""
    if current is not None and current.holder == identity:
        return LeaseRecord(identity, duration_s, current.acquire_time or now, now, current.transitions)
    transitions = current.transitions + 1 if current is not None and current.holder else (
        current.transitions if current is not None else 0)
    return LeaseRecord(identity, duration_s, now, now, transitions)


def held_by_other(record: LeaseRecord, identity: str, observed_at: float, now: float, default_duration: float) -> bool:
    """Whether another candidate still holds the Lease: it names a holder that is not
    ``identity`` and whose record changed less than a lease duration ago by the local clock
    (``observed_at``: when this process saw the current record first)."""
    if not record.holder or record.holder == identity:
        return False
    duration = record.duration_s if record.duration_s > 0 else default_duration
    return now < observed_at + duration


def micro_time(ts: float | None = None) -> str:
    """A Kubernetes MicroTime ("2006-01-02T15:04:05.000000Z") of wall-clock time ``ts``."""
    moment = datetime.datetime.fromtimestamp(time.time() if ts is None else ts, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Campaigns for the Lease ``namespace/name`` as ``identity`` and holds it while it can.

    ``lease_duration``, ``renew_deadline`` and ``retry_period`` (seconds, default 15/10/2 as
    client-go) must satisfy lease_duration > renew_deadline > retry_period * 1.2 > 0.
    ``annotations`` are written on the Lease with every claim (the controller puts its address
    there so others can name the leader); the dict may be changed before ``run()``.
    ``release_on_cancel``: clear the holder when ``run()`` is cancelled while leading.

    Public state: ``is_leader``; ``holder`` and ``holder_annotations`` (the current holder as last
    observed, "" and {} when the Lease is free or its holder lapsed); ``leading``, an
    asyncio.Event set exactly while leading.
    """

    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str, *,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 annotations: dict[str, str] | None = None, release_on_cancel: bool = True,
                 on_started_leading: Callable[[], None] | None = None,
                 on_stopped_leading: Callable[[], None] | None = None) -> None:
        validate_timings(lease_duration, renew_deadline, retry_period)
        if not identity:
            raise ValueError("a leader election needs a non-empty identity")
        self.client = client
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.annotations: dict[str, str] = dict(annotations or {})
        self.release_on_cancel = release_on_cancel
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.leading = asyncio.Event()
        self._valid_until = 0.0  # monotonic: leader until then unless renewed
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0  # monotonic: when the observed record was first seen
        self._observed_annotations: dict[str, str] = {}
        self._lease: dict | None = None  # the Lease as last read or written (for CAS)
        self._step_down = asyncio.Event()
        self._error_logged = ""

    # ------------------------------------------------------------------ public state

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set() and time.monotonic() < self._valid_until

    @property
    def holder(self) -> str:
        if self.is_leader:
            return self.identity
        rec = self._observed
        if rec is None or not held_by_other(rec, self.identity, self._observed_at, time.monotonic(),
                                            self.lease_duration):
            return ""
        return rec.holder

    @property
    def holder_annotations(self) -> dict[str, str]:
        if self.is_leader:
            return dict(self.annotations)
        return dict(self._observed_annotations) if self.holder else {}

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        """Campaign, lead until leadership is lost or given up, campaign again; forever, until
        cancelled (then release the Lease if leading and ``release_on_cancel``)."""
        try:
            while True:
                await self._acquire()
                self._start_leading()
                try:
                    await self._hold()
                finally:
                    self._stop_leading()
                if self._step_down.is_set():
                    self._step_down.clear()
                    await self._release()
                    await asyncio.sleep(self.retry_period)  # give a standby its turn first
        finally:
            if self.release_on_cancel and self._lease is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(self.renew_deadline):
                        await self._release()

    def step_down(self) -> None:
        """Stop leading now (``on_stopped_leading`` runs before this returns) and release the
        Lease; ``run()`` then campaigns again after a retry period. For a leader that found it
        can no longer act correctly (its state was changed under it)."""
        if self.leading.is_set():
            self._step_down.set()
            self._stop_leading()

    # ------------------------------------------------------------------ the loops

    async def _acquire(self) -> None:
        while True:
            if await self._attempt(self.renew_deadline):
                return
            await asyncio.sleep(self._acquire_delay())

    def _acquire_delay(self) -> float:
        delay = self.retry_period * random.uniform(1.0, JITTER)
        rec = self._observed
        if rec is not None and rec.holder and rec.holder != self.identity:
            duration = rec.duration_s if rec.duration_s > 0 else self.lease_duration
            expiry = self._observed_at + duration - time.monotonic()
            delay = min(delay, max(expiry, 0.0) + 0.01)  # try the moment the holder lapses
        return delay

    async def _hold(self) -> None:
        """Renew until the deadline passes, another holder shows up, or step_down()."""
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                async with asyncio.timeout(self.retry_period):  # not wait_for: see ferrymq.common.tasks.within
                    await self._step_down.wait()
            if self._step_down.is_set():
                return
            while True:
                remaining = self._valid_until - time.monotonic()
                if remaining <= 0:
                    log.warning("lease %s/%s: could not renew within %g s; no longer leading", self.namespace,
                                self.name, self.renew_deadline)
                    self._lease = None  # not ours to release any more
                    return
                try:
                    async with asyncio.timeout(remaining):
                        renewed = await self._attempt(remaining)
                except asyncio.TimeoutError:
                    renewed = False
                if self._step_down.is_set():
                    return
                if renewed:
                    break
                if self._observed is not None and self._observed.holder != self.identity:
                    log.warning("lease %s/%s: now held by %s; no longer leading", self.namespace, self.name,
                                self._observed.holder or "nobody (released under us)")
                    self._lease = None
                    return
                await asyncio.sleep(min(self.retry_period, max(self._valid_until - time.monotonic(), 0)))

    async def _attempt(self, timeout: float) -> bool:
        """One try to take or renew the Lease; True if this process holds it now. On success
        the leadership is valid for renew_deadline from the start of the try."""
        started = time.monotonic()
        timeout = max(min(timeout, self.renew_deadline), 0.001)
        try:
            ok = await self._try_acquire_or_renew(timeout)
        except Exception as exc:  # noqa: BLE001 - a failed try is retried; the loop must not die
            text = f"{type(exc).__name__}: {exc}"
            if text != self._error_logged:
                log.warning("lease %s/%s: %s", self.namespace, self.name, text)
                self._error_logged = text
            return False
        if ok:
            self._error_logged = ""
            self._valid_until = started + self.renew_deadline
        return ok

    async def _try_acquire_or_renew(self, timeout: float) -> bool:
        duration_s = max(1, math.ceil(self.lease_duration))
        try:
            lease = await self.client.get(LEASES, self.namespace, self.name, timeout=timeout)
        except NotFound:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace, "annotations": dict(self.annotations)},
                    "spec": claimed_record(None, self.identity, duration_s, micro_time()).to_spec()}
            try:
                created = await self.client.create(LEASES, self.namespace, body, timeout=timeout)
            except Conflict:
                return False  # another candidate created it first
            self._observe(created)
            return True
        self._observe(lease)
        record = LeaseRecord.of(lease)
        if held_by_other(record, self.identity, self._observed_at, time.monotonic(), self.lease_duration):
            return False
        if record.holder != self.identity and self.leading.is_set():
            return False  # released under a leader: it stops leading (the caller sees the holder) and campaigns again
        lease["spec"] = {**(lease.get("spec") or {}),
                         **claimed_record(record, self.identity, duration_s, micro_time()).to_spec()}
        meta = lease.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **self.annotations}
        try:
            updated = await self.client.replace(LEASES, self.namespace, self.name, lease, timeout=timeout)
        except Conflict:
            return False  # someone wrote it since we read it; the next read shows who
        self._observe(updated)
        return True

    def _observe(self, lease: dict) -> None:
        record = LeaseRecord.of(lease)
        if record != self._observed:
            self._observed = record
            self._observed_at = time.monotonic()
        self._observed_annotations = dict((lease.get("metadata") or {}).get("annotations") or {})
        self._lease = lease if record.holder == self.identity else None

    async def _release(self) -> None:
        """Clear holderIdentity if this process still holds the Lease (a CAS: if anyone wrote
        since, it is theirs and stays so)."""
        lease, self._lease = self._lease, None
        if lease is None:
            return
        lease = {**lease, "spec": {**(lease.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1,
                                   "renewTime": micro_time()}}
        try:
            released = await self.client.replace(LEASES, self.namespace, self.name, lease,
                                                 timeout=min(self.renew_deadline, 5.0))
            self._observe(released)
            log.info("lease %s/%s: released", self.namespace, self.name)
        except KubeError as exc:
            log.info("lease %s/%s: not released (%s); it lapses after its duration", self.namespace, self.name, exc)

    # ------------------------------------------------------------------ signals

    def _start_leading(self) -> None:
        self.leading.set()
        log.info("lease %s/%s: %s is leading", self.namespace, self.name, self.identity)
        self._call(self.on_started_leading)

    def _stop_leading(self) -> None:
        if not self.leading.is_set():
            return
        self.leading.clear()
        self._valid_until = 0.0
        log.info("lease %s/%s: %s stopped leading", self.namespace, self.name, self.identity)
        self._call(self.on_stopped_leading)

    def _call(self, callback: Callable[[], None] | None) -> None:
        if callback is not None:
            try:
                callback()
            except Exception:  # noqa: BLE001 - the election goes on; the callback's owner must hear of it
                log.exception("lease %s/%s: leadership callback failed", self.namespace, self.name)


def validate_timings(lease_duration: float, renew_deadline: float, retry_period: float) -> None:
    """client-go's rules: the leader must give up (renew_deadline) before others may take over
    (lease_duration), and retry at least once within the deadline."""
    if not (lease_duration > 0 and renew_deadline > 0 and retry_period > 0):
        raise ValueError("lease duration, renew deadline and retry period must all be positive")
    if lease_duration <= renew_deadline:
        raise ValueError(f"lease duration ({lease_duration:g} s) must be longer than the renew deadline "
                         f"({renew_deadline:g} s)")
    if renew_deadline <= JITTER * retry_period:
        raise ValueError(f"renew deadline ({renew_deadline:g} s) must be longer than {JITTER:g} x the retry period "
                         f"({retry_period:g} s)")
